package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metal3 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/bootstick/bootstick/internal/bpa/install"
	bpa "github.com/bootstick/bootstick/internal/bpa/v1alpha1"
	"github.com/bootstick/bootstick/internal/kubetest"
	"github.com/bootstick/bootstick/internal/sshkeys"
	"github.com/bootstick/bootstick/internal/userdata"
	"github.com/bootstick/bootstick/manifests"
)

// timeServer is the appliance's address on the provisioning network in
// the kubectl tests' install ConfigMap.
const timeServer = "172.22.0.1"

// kubectlSite is a namespace of a real API server that holds what
// firstboot's site step leaves (the install ConfigMap, which names none of
// the hosts below, and the BPA's SSH key) and what an operator applies
// with kubectl: BareMetalHosts with an image and no user data, and a
// Provisioning. Its Reconciler runs as the BPA's ServiceAccount, with the
// Role manifests/22-rbac-bpa.yaml gives copied into the namespace, and
// installs through install.Fake. Its Events and its log are kept.
type kubectlSite struct {
	t      *testing.T
	c      client.Client // the test's, as the operator
	r      *Reconciler
	ex     *install.Fake
	events *eventLog
	log    *syncBuffer
	ns     string
	bpaKey *sshkeys.KeyPair
	now    time.Time

	mu sync.Mutex
	// dialled is the host key and address each connect was given, by host.
	dialled map[string][2]string
}

// newKubectlSite makes the namespace ns with the site step's objects and
// the BPA's Role, and returns the site with a context whose logger writes
// to its log.
func newKubectlSite(ctx context.Context, t *testing.T, env *kubetest.Env, c client.Client, ns string) (context.Context, *kubectlSite) {
	t.Helper()
	key, err := sshkeys.Generate(nil)
	if err != nil {
		t.Fatal(err)
	}
	// The site's own host, which this test's hosts are not.
	siteKey, err := sshkeys.Generate(nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := installConfig(map[string]install.Host{"site-host": {Address: "10.0.0.9", HostKey: siteKey.Public}})
	cfg.TimeServers = []string{timeServer}
	data, err := cfg.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: install.ConfigMapName, Namespace: ns}, Data: map[string]string{install.ConfigKey: data}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: SSHKeySecret, Namespace: ns}, Type: corev1.SecretTypeSSHAuth,
			Data: map[string][]byte{corev1.SSHAuthPrivateKey: key.Private, "ssh-publickey": []byte(key.Public + "\n")}},
	} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	bpaRoleIn(ctx, t, c, ns)
	sa := rest.CopyConfig(env.Config)
	sa.Impersonate = rest.ImpersonationConfig{UserName: bpaUser, Groups: bpaGroups}
	saClient, err := client.New(sa, client.Options{Scheme: c.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	s := &kubectlSite{t: t, c: c, ex: &install.Fake{}, events: &eventLog{}, log: &syncBuffer{}, ns: ns, bpaKey: key,
		now: time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC), dialled: map[string][2]string{}}
	s.r = &Reconciler{Client: saClient, Installs: true, Now: func() time.Time { return s.now }, Recorder: s.events,
		Executors: func(cfg *install.Config, _ ssh.Signer) install.Connector {
			return func(ctx context.Context, name, address string) (install.Executor, error) {
				s.mu.Lock()
				s.dialled[name] = [2]string{cfg.Hosts[name].HostKey, address}
				s.mu.Unlock()
				return s.ex.Connect(ctx, name, address)
			}
		}}
	return ctrl.LoggerInto(ctx, logr.FromSlogHandler(slog.NewTextHandler(s.log, nil))), s
}

// bpaRoleIn gives the BPA's ServiceAccount, in ns, the Role that
// manifests/22-rbac-bpa.yaml gives it in the site's namespace.
func bpaRoleIn(ctx context.Context, t *testing.T, c client.Client, ns string) {
	t.Helper()
	data, err := fs.ReadFile(manifests.FS, "22-rbac-bpa.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var role rbacv1.Role
		if err := dec.Decode(&role); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if role.Kind != "Role" || role.Name != "bpa" {
			continue
		}
		if err := c.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "bpa", Namespace: ns}, Rules: role.Rules}); err != nil {
			t.Fatal(err)
		}
		if err := c.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "bpa", Namespace: ns},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "bpa"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "bpa", Namespace: "bpa-system"}}}); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatal("22-rbac-bpa.yaml has no Role bpa")
}

// syncBuffer is a log the BPA's goroutines write at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// applyBMH applies BareMetalHost name with mac as `kubectl apply` would:
// an image, no user data; edit changes it first. Its status then says
// state (the operator's progress).
func (s *kubectlSite) applyBMH(ctx context.Context, name, mac string, state metal3.ProvisioningState, edit func(*metal3.BareMetalHost)) {
	s.t.Helper()
	b := &metal3.BareMetalHost{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.ns}}
	b.Spec.BootMACAddress, b.Spec.Online = mac, true
	b.Spec.BMC = metal3.BMCDetails{Address: "redfish://192.0.2.1/redfish/v1/Systems/1", CredentialsName: name + "-bmc-secret"}
	b.Spec.Image = &metal3.Image{URL: "http://172.22.0.1:6180/images/debian.qcow2", Checksum: strings.Repeat("0", 64), ChecksumType: metal3.SHA256}
	if edit != nil {
		edit(b)
	}
	if err := s.c.Create(ctx, b); err != nil {
		s.t.Fatal(err)
	}
	s.setState(ctx, name, state, "")
}

// setState sets BareMetalHost name's provisioning state, with ip the
// address inspection saw on its boot NIC (none when empty). Provisioned
// means provisioned now.
func (s *kubectlSite) setState(ctx context.Context, name string, state metal3.ProvisioningState, ip string) {
	s.t.Helper()
	b := s.bmh(ctx, name)
	b.Status.OperationalStatus = metal3.OperationalStatusOK
	b.Status.Provisioning.State = state
	if state == metal3.StateProvisioned {
		b.Status.OperationHistory.Provision.End = metav1.NewTime(s.now)
	}
	if ip != "" {
		b.Status.HardwareDetails = &metal3.HardwareDetails{NIC: []metal3.NIC{{Name: "eth0", MAC: b.Spec.BootMACAddress, IP: ip}}}
	}
	if err := s.c.Status().Update(ctx, b); err != nil {
		s.t.Fatal(err)
	}
}

func (s *kubectlSite) bmh(ctx context.Context, name string) *metal3.BareMetalHost {
	s.t.Helper()
	var b metal3.BareMetalHost
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: name}, &b); err != nil {
		s.t.Fatal(err)
	}
	return &b
}

// secret is the BPA's user-data Secret of BareMetalHost bmh, or nil.
func (s *kubectlSite) secret(ctx context.Context, bmh string) *corev1.Secret {
	s.t.Helper()
	var sec corev1.Secret
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: UserDataSecretName(bmh)}, &sec); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		s.t.Fatal(err)
	}
	return &sec
}

// applyProvisioning applies Provisioning edge with masters and workers
// (name: MAC address).
func (s *kubectlSite) applyProvisioning(ctx context.Context, masters, workers map[string]string) {
	s.t.Helper()
	p := &bpa.Provisioning{ObjectMeta: metav1.ObjectMeta{Name: "edge", Namespace: s.ns}}
	for n, mac := range masters {
		p.Spec.Masters = append(p.Spec.Masters, map[string]bpa.Master{n: {MACaddress: mac}})
	}
	for n, mac := range workers {
		p.Spec.Workers = append(p.Spec.Workers, map[string]bpa.Worker{n: {MACaddress: mac}})
	}
	if err := s.c.Create(ctx, p); err != nil {
		s.t.Fatal(err)
	}
}

// reconcile runs one pass as the manager would and returns the
// Provisioning it left. No private key (the BPA's, or a host key of a
// user-data Secret) reaches the status, an Event, a BareMetalHost's
// annotations or the log.
func (s *kubectlSite) reconcile(ctx context.Context) *bpa.Provisioning {
	s.t.Helper()
	if _, err := s.r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: s.ns, Name: "edge"}}); err != nil {
		s.t.Fatalf("Reconcile: %v", err)
	}
	var p bpa.Provisioning
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: "edge"}, &p); err != nil {
		s.t.Fatal(err)
	}
	s.noPrivateKeys(ctx, &p)
	return &p
}

// noPrivateKeys fails the test when a private key shows anywhere but in
// the Secrets.
func (s *kubectlSite) noPrivateKeys(ctx context.Context, p *bpa.Provisioning) {
	s.t.Helper()
	var secrets corev1.SecretList
	if err := s.c.List(ctx, &secrets, client.InNamespace(s.ns)); err != nil {
		s.t.Fatal(err)
	}
	keys := [][]byte{s.bpaKey.Private}
	for _, sec := range secrets.Items {
		if h, err := userdata.Parse(sec.Data[userdata.Key]); err == nil && h.HostKey != nil {
			keys = append(keys, h.HostKey.Private)
		}
	}
	var bmhs metal3.BareMetalHostList
	if err := s.c.List(ctx, &bmhs, client.InNamespace(s.ns)); err != nil {
		s.t.Fatal(err)
	}
	status, _ := json.Marshal(p.Status)
	places := map[string]string{"the status": string(status), "the log": s.log.String(), "the Events": strings.Join(s.events.all(), "\n")}
	for _, b := range bmhs.Items {
		a, _ := json.Marshal(b.Annotations)
		spec, _ := json.Marshal(b.Spec)
		places["BareMetalHost "+b.Name] = string(a) + string(spec)
	}
	for where, text := range places {
		if strings.Contains(text, "PRIVATE KEY") {
			s.t.Fatalf("%s holds a private key", where)
		}
		for _, k := range keys {
			// Each line of the key's body, so that a key cut or re-wrapped is found too.
			for _, line := range strings.Split(string(k), "\n") {
				if len(line) >= 40 && !strings.HasPrefix(line, "-----") && strings.Contains(text, line) {
					s.t.Fatalf("%s holds a line of a private key", where)
				}
			}
		}
	}
}

// TestKubectlHostGetsUserData: a BareMetalHost and a Provisioning applied
// with kubectl, the install ConfigMap naming neither. The BPA gives the
// host user data of its own (its SSH key, a new host key, the time
// servers), records the host key on the BareMetalHost in the same patch
// that sets spec.userData, converges on a rerun after each partial step
// without a second key, and, once the host is provisioned, installs it
// at the address inspection saw (or the address annotation's) with that
// host key pinned, to Ready. It runs as the BPA's ServiceAccount.
func TestKubectlHostGetsUserData(t *testing.T) {
	ctx, env, c := apiSitesEnv(t)
	ctx, s := newKubectlSite(ctx, t, env, c, "kubectl-userdata")
	const macM, macW = "52:54:00:00:01:10", "52:54:00:00:01:20"
	s.applyBMH(ctx, "bmh-m0", macM, metal3.StateRegistering, nil)
	s.applyBMH(ctx, "bmh-w1", macW, metal3.StateInspecting, func(b *metal3.BareMetalHost) {
		b.Annotations = map[string]string{AddressAnnotation: "192.0.2.21"}
	})
	s.applyProvisioning(ctx, map[string]string{"m0": macM}, map[string]string{"w1": macW})

	p := s.reconcile(ctx)
	keys := map[string]string{}
	for host, bmh := range map[string]string{"m0": "bmh-m0", "w1": "bmh-w1"} {
		sec := s.secret(ctx, bmh)
		if sec == nil {
			t.Fatalf("no Secret %s after the first pass", UserDataSecretName(bmh))
		}
		b := s.bmh(ctx, bmh)
		if len(sec.OwnerReferences) != 1 || sec.OwnerReferences[0].UID != b.UID || sec.OwnerReferences[0].Kind != "BareMetalHost" {
			t.Errorf("Secret %s is owned by %+v, want BareMetalHost %s only (it goes with it)", sec.Name, sec.OwnerReferences, bmh)
		}
		ud, err := userdata.Parse(sec.Data[userdata.Key])
		if err != nil {
			t.Fatalf("Secret %s: %v", sec.Name, err)
		}
		if ud.Hostname != host || !slices.Equal(ud.AuthorizedKeys, []string{s.bpaKey.Public}) || !slices.Equal(ud.NTPServers, []string{timeServer}) || ud.HostKey == nil {
			t.Errorf("%s's user data: hostname %q, authorized keys %q, time servers %q, host key %v; want %s, the BPA's key, %s and a host key",
				host, ud.Hostname, ud.AuthorizedKeys, ud.NTPServers, ud.HostKey != nil, host, timeServer)
		}
		if b.Annotations[HostKeyAnnotation] != ud.HostKey.Public {
			t.Errorf("BareMetalHost %s: annotation %s %q, want the user data's host key %q", bmh, HostKeyAnnotation, b.Annotations[HostKeyAnnotation], ud.HostKey.Public)
		}
		if u := b.Spec.UserData; u == nil || u.Name != sec.Name || u.Namespace != s.ns {
			t.Errorf("BareMetalHost %s: spec.userData %+v, want Secret %s/%s", bmh, u, s.ns, sec.Name)
		}
		if h := hostOf(p, host); h.State == bpa.HostError {
			t.Errorf("%s: %s %s", host, h.State, h.Error)
		}
		keys[bmh] = ud.HostKey.Public
	}
	if !s.events.has("Normal "+ReasonUserDataWritten, "host m0", "bmh-m0-bpa-user-data", fingerprint(keys["bmh-m0"])) {
		t.Errorf("no %s Event for m0: %v", ReasonUserDataWritten, s.events.all())
	}

	// sameKeys checks that each BareMetalHost is as the first pass left
	// it: the same host key, in its annotation and in its Secret.
	sameKeys := func(step string) {
		t.Helper()
		for bmh, want := range keys {
			b, sec := s.bmh(ctx, bmh), s.secret(ctx, bmh)
			ud, err := userdata.Parse(sec.Data[userdata.Key])
			if err != nil || b.Annotations[HostKeyAnnotation] != want || ud.HostKey.Public != want || b.Spec.UserData == nil {
				t.Fatalf("%s: BareMetalHost %s's host key %q, its Secret's %v (%v), spec.userData %+v; want %q in both, no second key",
					step, bmh, b.Annotations[HostKeyAnnotation], ud.HostKey, err, b.Spec.UserData, want)
			}
		}
	}

	// A second pass changes nothing.
	rv := map[string]string{}
	for bmh := range keys {
		rv[bmh] = s.bmh(ctx, bmh).ResourceVersion + "/" + s.secret(ctx, bmh).ResourceVersion
	}
	events := len(s.events.all())
	s.reconcile(ctx)
	for bmh := range keys {
		if got := s.bmh(ctx, bmh).ResourceVersion + "/" + s.secret(ctx, bmh).ResourceVersion; got != rv[bmh] {
			t.Errorf("a second pass wrote BareMetalHost %s or its Secret (resourceVersions %s, then %s)", bmh, rv[bmh], got)
		}
	}
	if n := len(s.events.all()); n != events {
		t.Errorf("a second pass recorded %v", s.events.all()[events:])
	}

	// A pass cut short after writing the Secret, before the patch: the
	// next one takes the Secret's key.
	unpatch := func(bmh, patch string) {
		t.Helper()
		if err := c.Patch(ctx, s.bmh(ctx, bmh), client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
			t.Fatal(err)
		}
	}
	unpatch("bmh-m0", fmt.Sprintf(`{"metadata":{"annotations":{%q:null}},"spec":{"userData":null}}`, HostKeyAnnotation))
	s.reconcile(ctx)
	sameKeys("after a pass cut short between the Secret and the patch")
	// The annotation lost (removed by hand): written back from the Secret.
	unpatch("bmh-m0", fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, HostKeyAnnotation))
	s.reconcile(ctx)
	sameKeys("after the annotation was removed")

	// The patch holds only while the BareMetalHost is as the pass read it:
	// one that moved on meanwhile (its operator started provisioning it)
	// is left alone and read again.
	stale := s.bmh(ctx, "bmh-m0")
	unpatch("bmh-m0", fmt.Sprintf(`{"metadata":{"annotations":{%q:null}},"spec":{"userData":null}}`, HostKeyAnnotation))
	g := &giver{r: s.r, p: p, cfg: installConfig(nil)}
	if problem, again, err := g.patch(ctx, "m0", stale, "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFAKEFAKEFAKEFAKEFAKEFAKEFAKEFAKEFAKEFAKEFAK stale", true); err != nil || problem != "" || again == 0 {
		t.Errorf("a patch of a BareMetalHost read before it changed: problem %q, again %v, err %v; want it refused and read again", problem, again, err)
	}
	if b := s.bmh(ctx, "bmh-m0"); b.Annotations[HostKeyAnnotation] != "" || b.Spec.UserData != nil {
		t.Fatalf("a stale patch wrote BareMetalHost bmh-m0: %v %+v", b.Annotations, b.Spec.UserData)
	}
	s.reconcile(ctx)
	sameKeys("after a stale patch")

	// Provisioned (the operator read the user data), with the address
	// inspection saw: installed with the host key pinned, to Ready.
	s.setState(ctx, "bmh-m0", metal3.StateProvisioned, "192.0.2.10")
	s.setState(ctx, "bmh-w1", metal3.StateProvisioned, "192.0.2.99")
	p = s.reconcile(ctx)
	if cond := meta.FindStatusCondition(p.Status.Conditions, ConditionClusterReady); cond == nil || cond.Status != metav1.ConditionTrue {
		t.Fatalf("ClusterReady %+v, hosts %+v", cond, p.Status.Hosts)
	}
	for host, want := range map[string][2]string{"m0": {keys["bmh-m0"], "192.0.2.10"}, "w1": {keys["bmh-w1"], "192.0.2.21"}} {
		s.mu.Lock()
		got := s.dialled[host]
		s.mu.Unlock()
		if got != want {
			t.Errorf("%s was dialled pinning %q at %q, want %q at %q (w1: its address annotation, not inspection's)", host, got[0], got[1], want[0], want[1])
		}
		if h := hostOf(p, host); h.State != bpa.HostReady || h.Address != want[1] {
			t.Errorf("%s: %s at %q, want Ready at %s", host, h.State, h.Address, want[1])
		}
	}
	var kc corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: KubeconfigSecretName("edge")}, &kc); err != nil {
		t.Errorf("the kubeconfig Secret: %v", err)
	}
	sameKeys("once installed")
	noLeaks(t, s.ex)
}

// TestKubectlRefusals: a host the BPA can pin no host key for is in
// Error saying what to do, with one Warning Event however many passes
// see it, and nothing is written for it or run on it: one provisioned
// (or provisioning) without user data, one with user data of its own,
// one provisioned externally, one with a bad annotation. Doing what the
// message says for the first (deprovision it) gives it user data.
func TestKubectlRefusals(t *testing.T) {
	ctx, env, c := apiSitesEnv(t)
	const mac = "52:54:00:00:02:10"
	for i, tc := range []struct {
		name  string
		state metal3.ProvisioningState
		edit  func(*metal3.BareMetalHost)
		// want are the words the host's error holds.
		want []string
		// fix, when set, does what the error says, and the host then
		// gets user data.
		fix func(ctx context.Context, s *kubectlSite)
	}{
		{name: "provisioned", state: metal3.StateProvisioned,
			want: []string{"BareMetalHost bmh-m0 was provisioned (state provisioned) without user data the BPA can pin",
				`kubectl -n kubectl-refuse-0 patch bmh bmh-m0 --type merge -p '{"spec":{"image":null}}'`, "set its image again"},
			fix: func(ctx context.Context, s *kubectlSite) {
				if err := s.c.Patch(ctx, s.bmh(ctx, "bmh-m0"), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"image":null}}`))); err != nil {
					s.t.Fatal(err)
				}
				s.setState(ctx, "bmh-m0", metal3.StateDeprovisioning, "")
			}},
		{name: "provisioning", state: metal3.StateProvisioning,
			want: []string{"BareMetalHost bmh-m0 started provisioning (state provisioning) without user data the BPA can pin", `patch bmh bmh-m0 --type merge -p '{"spec":{"image":null}}'`}},
		{name: "restored provisioned", state: metal3.StateNone,
			edit: func(b *metal3.BareMetalHost) {
				b.Annotations = map[string]string{metal3.StatusAnnotation: `{"provisioning":{"state":"provisioned","ID":""},"operationalStatus":"OK","poweredOn":true,"errorCount":0,"errorMessage":"","hardwareProfile":""}`}
			},
			want: []string{"was provisioned (state provisioned) without user data"}},
		{name: "own user data", state: metal3.StateAvailable,
			edit: func(b *metal3.BareMetalHost) {
				b.Spec.UserData = &corev1.SecretReference{Name: "my-user-data", Namespace: b.Namespace}
			},
			want: []string{"BareMetalHost bmh-m0 has user data of its own (Secret my-user-data)", "annotate it " + HostKeyAnnotation,
				"kubectl -n kubectl-refuse-3 get secret bootstick-ssh-key -o jsonpath='{.data.ssh-publickey}' | base64 -d", "ssh_authorized_keys"}},
		{name: "externally provisioned", state: metal3.StateExternallyProvisioned,
			edit: func(b *metal3.BareMetalHost) { b.Spec.ExternallyProvisioned, b.Spec.Image = true, nil },
			want: []string{"externally provisioned", HostKeyAnnotation, AddressAnnotation, "root's authorized_keys"}},
		{name: "bad annotation", state: metal3.StateAvailable,
			edit: func(b *metal3.BareMetalHost) { b.Annotations = map[string]string{HostKeyAnnotation: "not a key"} },
			want: []string{"annotation " + HostKeyAnnotation + " is not an SSH public key"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, s := newKubectlSite(ctx, t, env, c, fmt.Sprintf("kubectl-refuse-%d", i))
			s.applyBMH(ctx, "bmh-m0", mac, tc.state, tc.edit)
			s.applyProvisioning(ctx, map[string]string{"m0": mac}, nil)
			before := s.bmh(ctx, "bmh-m0")
			var h bpa.HostStatus
			for range 3 {
				s.now = s.now.Add(time.Minute)
				h = hostOf(s.reconcile(ctx), "m0")
			}
			for _, w := range tc.want {
				if h.State != bpa.HostError || !strings.Contains(h.Error, w) {
					t.Errorf("m0: %s %q, want Error saying %q", h.State, h.Error, w)
				}
			}
			var warnings []string
			for _, e := range s.events.all() {
				if strings.HasPrefix(e, "Warning") {
					warnings = append(warnings, e)
				}
			}
			if len(warnings) != 1 || !strings.HasPrefix(warnings[0], "Warning "+ReasonNoHostKey+" host m0: ") {
				t.Errorf("Warning Events after three passes: %q, want one %s", warnings, ReasonNoHostKey)
			}
			if sec := s.secret(ctx, "bmh-m0"); sec != nil {
				t.Errorf("a Secret %s was written", sec.Name)
			}
			if b := s.bmh(ctx, "bmh-m0"); b.ResourceVersion != before.ResourceVersion {
				t.Errorf("BareMetalHost bmh-m0 was written: annotations %v, spec.userData %+v", b.Annotations, b.Spec.UserData)
			}
			if calls := s.ex.Calls(); len(calls) != 0 {
				t.Errorf("the BPA reached the host: %+v", calls)
			}
			if tc.fix == nil {
				return
			}
			tc.fix(ctx, s)
			h = hostOf(s.reconcile(ctx), "m0")
			b := s.bmh(ctx, "bmh-m0")
			if h.State == bpa.HostError || s.secret(ctx, "bmh-m0") == nil || b.Annotations[HostKeyAnnotation] == "" || b.Spec.UserData == nil {
				t.Errorf("after doing what the error said: m0 %s %q, annotations %v, spec.userData %+v; want user data given", h.State, h.Error, b.Annotations, b.Spec.UserData)
			}
		})
	}
}
