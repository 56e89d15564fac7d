package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"time"

	metal3 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bootstick/bootstick/internal/bpa/install"
	bpa "github.com/bootstick/bootstick/internal/bpa/v1alpha1"
	"github.com/bootstick/bootstick/internal/sshkeys"
	"github.com/bootstick/bootstick/internal/userdata"
)

// A host of a Provisioning that the install ConfigMap does not name (its
// BareMetalHost and the Provisioning were applied with kubectl, not
// rendered from the site) gets its host key and its address from its
// BareMetalHost's annotations:
const (
	// HostKeyAnnotation is the host's SSH host key, the public half in
	// authorized_keys format, which the BPA pins. The BPA writes it with
	// the user data it gives the host; an operator who gives the host
	// user data of their own writes it.
	HostKeyAnnotation = "bpa.akraino.org/host-key"
	// AddressAnnotation is where the BPA reaches the host over SSH (an IP
	// address, optionally with sshd's port), for a host with a static
	// address. Without it the BPA takes the address inspection saw on the
	// boot NIC.
	AddressAnnotation = "bpa.akraino.org/address"
)

// UserDataSecretName names the user-data Secret the BPA writes for
// BareMetalHost bmh (key userdata.Key), owned by it.
func UserDataSecretName(bmh string) string { return bmh + "-bpa-user-data" }

// Reasons of the Events about a host's user data.
const (
	ReasonUserDataWritten = "UserDataWritten"
	ReasonNoHostKey       = "NoHostKey"
)

// managedByBPA labels the Secrets the BPA writes for hosts: not
// firstboot's label, so that firstboot's site apply never takes them for
// its own.
var managedByBPA = map[string]string{"app.kubernetes.io/managed-by": EventRecorderName}

// giveUserData gives each host of p that neither the install ConfigMap
// nor its BareMetalHost gives a host key user data of the BPA's, while its
// BareMetalHost has none and has not started provisioning (the
// baremetal-operator reads it when it starts: its provisioning state
// builds the config drive). A host it cannot give any is in Error in st,
// saying what to do, with a Warning Event when that message is new. It
// does nothing while the ConfigMap or the SSH key is missing or bad: the
// install refuses those. It says when to look again (a BareMetalHost
// changed under it).
func (r *Reconciler) giveUserData(ctx context.Context, p *bpa.Provisioning, st *bpa.ProvisioningStatus, bmhs []metal3.BareMetalHost) (time.Duration, error) {
	cfg, err := r.installConfig(ctx, p.Namespace)
	if cfg == nil || err != nil {
		return 0, err
	}
	byName := map[string]*metal3.BareMetalHost{}
	for i := range bmhs {
		byName[bmhs[i].Name] = &bmhs[i]
	}
	prev := map[string]*bpa.HostStatus{}
	for i := range p.Status.Hosts {
		prev[p.Status.Hosts[i].Name] = &p.Status.Hosts[i]
	}
	g := &giver{r: r, p: p, cfg: cfg}
	var again time.Duration
	for i := range st.Hosts {
		h := &st.Hosts[i]
		b := byName[h.BareMetalHost]
		if b == nil || b.DeletionTimestamp != nil || cfg.Hosts[h.Name].HostKey != "" {
			continue
		}
		problem, wait, err := g.host(ctx, h.Name, b)
		if err != nil {
			return 0, err
		}
		if wait > 0 && (again == 0 || wait < again) {
			again = wait
		}
		if problem != "" && refuseHost(h, prev[h.Name], problem) {
			ctrl.LoggerFrom(ctx).Info("no host key for a host", "host", h.Name, "baremetalhost", b.Name, "problem", problem)
			r.event(ref(p), true, ReasonNoHostKey, "UserData", fmt.Sprintf("host %s: %s", h.Name, problem))
		}
	}
	return again, nil
}

// installConfig reads the install ConfigMap, or nil when it is missing
// or bad (the install refuses it, saying why).
func (r *Reconciler) installConfig(ctx context.Context, ns string) (*install.Config, error) {
	var cm corev1.ConfigMap
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: install.ConfigMapName}, &cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading ConfigMap %s/%s: %w", ns, install.ConfigMapName, err)
	}
	cfg, err := install.ParseConfig(cm.Data[install.ConfigKey])
	if err != nil {
		return nil, nil
	}
	return cfg, nil
}

// refuseHost puts h in Error with msg: it has no host key the BPA can
// pin, so the install leaves it (its record goes; it starts anew once it
// has one). It reports whether msg is new (prev, the status before, did
// not say it), keeping LastUpdated when not.
func refuseHost(h, prev *bpa.HostStatus, msg string) bool {
	h.State, h.Error = bpa.HostError, msg
	h.ProvisionedAt, h.Phases, h.Address, h.Failures, h.NextRetry = nil, nil, "", 0, nil
	if prev != nil && prev.State == bpa.HostError && prev.Error == msg && prev.LastUpdated != nil {
		h.LastUpdated = prev.LastUpdated
		return false
	}
	return true
}

// giver gives one pass's hosts their user data.
type giver struct {
	r   *Reconciler
	p   *bpa.Provisioning
	cfg *install.Config
	// bpaKey is the BPA's SSH public key, read once; loaded says it was
	// read (it stays empty when the Secret is missing or bad).
	bpaKey string
	loaded bool
}

// host sees to host name's key, matched to b, which the ConfigMap gives
// none. It returns what is wrong (for the host's status), or when to look
// again.
func (g *giver) host(ctx context.Context, name string, b *metal3.BareMetalHost) (string, time.Duration, error) {
	ns := b.Namespace
	if a := b.Annotations[AddressAnnotation]; a != "" && !validAddress(a) {
		return fmt.Sprintf("BareMetalHost %s: annotation %s %q is not an IP address (with sshd's port, optionally)", b.Name, AddressAnnotation, a), 0, nil
	}
	if a := b.Annotations[HostKeyAnnotation]; a != "" {
		if _, _, _, _, err := ssh.ParseAuthorizedKey([]byte(a)); err != nil {
			return fmt.Sprintf("BareMetalHost %s: annotation %s is not an SSH public key in authorized_keys format (ssh-ed25519 AAAA…)", b.Name, HostKeyAnnotation), 0, nil
		}
		return "", 0, nil // pinned
	}
	ours := UserDataSecretName(b.Name)
	if u := b.Spec.UserData; u != nil {
		if u.Name == ours && (u.Namespace == "" || u.Namespace == ns) {
			// The BPA's own user data without its annotation (removed by
			// hand): the Secret holds the key.
			return g.recover(ctx, name, b)
		}
		return fmt.Sprintf("BareMetalHost %s has user data of its own (Secret %s) and the BPA knows no host key for it: annotate it %s with the SSH host key that user data installs (its public half, authorized_keys format) and put the BPA's SSH public key (%s) in its ssh_authorized_keys; or, before it provisions, remove its spec.userData and the BPA gives it user data of its own",
			b.Name, u.Name, HostKeyAnnotation, bpaKeyCommand(ns)), 0, nil
	}
	if b.Spec.ExternallyProvisioned || b.Status.Provisioning.State == metal3.StateExternallyProvisioned {
		return fmt.Sprintf("BareMetalHost %s is externally provisioned: its OS takes no user data, and the BPA knows no host key for it. Annotate it %s with the host's SSH host key (its /etc/ssh/ssh_host_ed25519_key.pub, read on the host) and %s with its address, and put the BPA's SSH public key (%s) in root's authorized_keys on it",
			b.Name, HostKeyAnnotation, AddressAnnotation, bpaKeyCommand(ns)), 0, nil
	}
	// The operator reads the user data as it starts provisioning (the
	// provisioning state builds the config drive): from then on, user
	// data given is user data the host may never have seen.
	switch st := provisioningState(b); st {
	case metal3.StateProvisioning, metal3.StateProvisioned:
		what := "was provisioned"
		if st == metal3.StateProvisioning {
			what = "started provisioning"
		}
		return fmt.Sprintf("BareMetalHost %s %s (state %s) without user data the BPA can pin, so the BPA cannot tell the host from another machine. Deprovision it (kubectl -n %s patch bmh %s --type merge -p '{\"spec\":{\"image\":null}}'), wait until it is available, and set its image again: meanwhile the BPA gives it user data (Secret %s) with a host key it pins",
			b.Name, what, st, ns, b.Name, ours), 0, nil
	}
	key, err := g.key(ctx)
	if key == "" || err != nil {
		return "", 0, err // the install refuses a missing or bad key
	}
	hk, problem, err := g.secret(ctx, name, b, key)
	if problem != "" || err != nil {
		return problem, time.Minute, err
	}
	return g.patch(ctx, name, b, hk.Public, true)
}

// recover writes the host key of the BPA's Secret that b's user data
// names back into b's annotation.
func (g *giver) recover(ctx context.Context, name string, b *metal3.BareMetalHost) (string, time.Duration, error) {
	_, hk, problem, err := g.read(ctx, b)
	if problem != "" || err != nil {
		return problem, time.Minute, err
	}
	if hk == nil {
		return fmt.Sprintf("BareMetalHost %s names user data Secret %s, which is gone: remove its spec.userData before it provisions, and the BPA writes it again", b.Name, UserDataSecretName(b.Name)), time.Minute, nil
	}
	return g.patch(ctx, name, b, hk.Public, false)
}

// read reads the BPA's user-data Secret of b and the host key in it: nil
// when there is no Secret, a problem when it is not b's or holds no key.
func (g *giver) read(ctx context.Context, b *metal3.BareMetalHost) (*corev1.Secret, *sshkeys.KeyPair, string, error) {
	var s corev1.Secret
	key := types.NamespacedName{Namespace: b.Namespace, Name: UserDataSecretName(b.Name)}
	if err := g.r.Client.Get(ctx, key, &s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, "", nil
		}
		return nil, nil, "", fmt.Errorf("reading Secret %s: %w", key, err)
	}
	if !ownedBy(&s, b) {
		return nil, nil, fmt.Sprintf("Secret %s is not BareMetalHost %s's (the BPA writes it owned by its BareMetalHost; one left by an earlier BareMetalHost of that name goes with it): delete it, and the BPA writes it anew", key, b.Name), nil
	}
	h, err := userdata.Parse(s.Data[userdata.Key])
	if err == nil && h.HostKey == nil {
		err = fmt.Errorf("no host key")
	}
	if err != nil {
		return nil, nil, fmt.Sprintf("Secret %s: key %s is not user data the BPA wrote (%v): delete it, and the BPA writes it anew", key, userdata.Key, err), nil
	}
	return &s, h.HostKey, "", nil
}

// secret makes sure the BPA's user-data Secret of b holds what the BPA
// writes now for host name, with the host key it holds (one made now when
// there is none: a pass cut short after writing it makes no second one).
func (g *giver) secret(ctx context.Context, name string, b *metal3.BareMetalHost, bpaKey string) (*sshkeys.KeyPair, string, error) {
	s, hk, problem, err := g.read(ctx, b)
	if problem != "" || err != nil {
		return nil, problem, err
	}
	made := hk == nil
	if made {
		if hk, err = sshkeys.Generate(nil); err != nil {
			return nil, "", err
		}
	}
	data, err := userdata.CloudConfig(userdata.Host{Hostname: name, AuthorizedKeys: []string{bpaKey}, HostKey: hk, NTPServers: g.cfg.TimeServers})
	if err != nil {
		return nil, "", err
	}
	if made {
		s = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: UserDataSecretName(b.Name), Namespace: b.Namespace}}
		s.Labels = maps.Clone(managedByBPA)
		s.OwnerReferences = []metav1.OwnerReference{{APIVersion: metal3.GroupVersion.String(), Kind: "BareMetalHost", Name: b.Name, UID: b.UID}}
		s.Type = corev1.SecretTypeOpaque
		s.Data = map[string][]byte{userdata.Key: data}
		if err := g.r.Client.Create(ctx, s); err != nil {
			// Another pass wrote it in between: the next reads it.
			return nil, "", fmt.Errorf("creating Secret %s/%s: %w", s.Namespace, s.Name, err)
		}
		ctrl.LoggerFrom(ctx).Info("user data written", "host", name, "baremetalhost", b.Name, "secret", s.Name, "hostKey", fingerprint(hk.Public))
		return hk, "", nil
	}
	// The Secret of a pass cut short (or of an earlier Provisioning, or an
	// older SSH key): the same host key, the rest as now.
	if string(s.Data[userdata.Key]) != string(data) {
		s.Data = map[string][]byte{userdata.Key: data}
		if err := g.r.Client.Update(ctx, s); err != nil {
			return nil, "", fmt.Errorf("updating Secret %s/%s: %w", s.Namespace, s.Name, err)
		}
	}
	return hk, "", nil
}

// patch records host key pub on b and, with setUserData, makes b's user
// data the BPA's Secret, in one patch that holds only while b is as the
// pass read it: a BareMetalHost that started provisioning meanwhile (its
// status moved) is read again next pass, never given user data it may
// not have read.
func (g *giver) patch(ctx context.Context, name string, b *metal3.BareMetalHost, pub string, setUserData bool) (string, time.Duration, error) {
	ud := &corev1.SecretReference{Name: UserDataSecretName(b.Name), Namespace: b.Namespace}
	m := map[string]any{"metadata": map[string]any{"resourceVersion": b.ResourceVersion, "annotations": map[string]string{HostKeyAnnotation: pub}}}
	if setUserData {
		m["spec"] = map[string]any{"userData": ud}
	}
	data, err := json.Marshal(m)
	if err != nil {
		return "", 0, err
	}
	if err := g.r.Client.Patch(ctx, b.DeepCopy(), client.RawPatch(types.MergePatchType, data)); err != nil {
		if apierrors.IsConflict(err) {
			return "", time.Second, nil
		}
		return "", 0, fmt.Errorf("patching BareMetalHost %s/%s: %w", b.Namespace, b.Name, err)
	}
	if b.Annotations == nil {
		b.Annotations = map[string]string{}
	}
	b.Annotations[HostKeyAnnotation] = pub
	b.Spec.UserData = ud
	what := "its host key recorded again"
	if setUserData {
		what = "user data in Secret " + ud.Name
	}
	g.r.event(ref(g.p), false, ReasonUserDataWritten, "UserData", fmt.Sprintf("host %s: BareMetalHost %s has %s; the BPA pins host key %s (annotation %s)",
		name, b.Name, what, fingerprint(pub), HostKeyAnnotation))
	return "", 0, nil
}

// key is the BPA's SSH public key, from its Secret; empty when the
// Secret is missing or holds no key.
func (g *giver) key(ctx context.Context) (string, error) {
	if g.loaded {
		return g.bpaKey, nil
	}
	var s corev1.Secret
	if err := g.r.Client.Get(ctx, types.NamespacedName{Namespace: g.p.Namespace, Name: SSHKeySecret}, &s); err != nil {
		if apierrors.IsNotFound(err) {
			g.loaded = true
			return "", nil
		}
		return "", fmt.Errorf("reading Secret %s/%s: %w", g.p.Namespace, SSHKeySecret, err)
	}
	g.loaded = true
	if kp, err := sshkeys.Parse(s.Data[corev1.SSHAuthPrivateKey]); err == nil {
		g.bpaKey = kp.Public
	}
	return g.bpaKey, nil
}

// annotated is cfg with, for each host the ConfigMap gives no host key or
// no address, those its BareMetalHost's annotations give: the address is
// the ConfigMap's, else the annotation's, else (prepare) the one
// inspection saw.
func annotated(cfg *install.Config, hosts []bpa.HostStatus, bmhs map[string]*metal3.BareMetalHost) *install.Config {
	out := *cfg
	out.Hosts = maps.Clone(cfg.Hosts)
	if out.Hosts == nil {
		out.Hosts = map[string]install.Host{}
	}
	for _, h := range hosts {
		b := bmhs[h.BareMetalHost]
		if b == nil {
			continue
		}
		ih, had := out.Hosts[h.Name]
		if ih.HostKey == "" {
			ih.HostKey = b.Annotations[HostKeyAnnotation]
		}
		if a := b.Annotations[AddressAnnotation]; ih.Address == "" && validAddress(a) {
			ih.Address = a
		}
		if had || ih != (install.Host{}) {
			out.Hosts[h.Name] = ih
		}
	}
	return &out
}

// provisioningState is b's provisioning state, or the one its status
// annotation holds while it has none (a BareMetalHost moved or restored,
// whose status the operator restores from it).
func provisioningState(b *metal3.BareMetalHost) metal3.ProvisioningState {
	if st := b.Status.Provisioning.State; st != metal3.StateNone {
		return st
	}
	if saved, ok := savedStatus(b); ok {
		return saved.Status.Provisioning.State
	}
	return metal3.StateNone
}

// validAddress reports whether a is an IP address, with a port or not.
func validAddress(a string) bool {
	return net.ParseIP(hostOnly(a)) != nil
}

// ownedBy reports whether s is owned by b (by UID).
func ownedBy(s *corev1.Secret, b *metal3.BareMetalHost) bool {
	for _, o := range s.OwnerReferences {
		if o.UID == b.UID && o.Kind == "BareMetalHost" {
			return true
		}
	}
	return false
}

// fingerprint is a public key's SHA-256 fingerprint, or "" for no key.
func fingerprint(pub string) string {
	k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(pub))
	if err != nil {
		return ""
	}
	return ssh.FingerprintSHA256(k)
}

// bpaKeyCommand is how an operator reads the BPA's SSH public key.
func bpaKeyCommand(ns string) string {
	return fmt.Sprintf("kubectl -n %s get secret %s -o jsonpath='{.data.ssh-publickey}' | base64 -d", ns, SSHKeySecret)
}
