package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metal3 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/bootstick/bootstick/internal/bpa/install"
	bpa "github.com/bootstick/bootstick/internal/bpa/v1alpha1"
	"github.com/bootstick/bootstick/internal/kubetest"
	"github.com/bootstick/bootstick/internal/testctx"
)

// apiSite is a Provisioning in a namespace of a real API server, with a
// provisioned BareMetalHost per host, reconciled as the manager would
// (its status from the BareMetalHosts, then the install) and installed
// through install.Fake. Its Events are kept.
type apiSite struct {
	t      *testing.T
	c      client.Client
	r      *Reconciler
	ex     *install.Fake
	events *eventLog
	ns     string
	now    time.Time
	// macs are the hosts' boot MAC addresses, by name.
	macs map[string]string
}

// apiSites starts etcd and kube-apiserver for a test of apiSites
// (skipped with -short), and returns the test's context and a client.
func apiSites(t *testing.T) (context.Context, client.Client) {
	t.Helper()
	ctx, _, c := apiSitesEnv(t)
	return ctx, c
}

// apiSitesEnv is apiSites with the API server's environment (its
// configuration, for clients of other identities).
func apiSitesEnv(t *testing.T) (context.Context, *kubetest.Env, client.Client) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver from the toolchain")
	}
	ctx, cancel := testctx.New(t, 2*time.Minute)
	t.Cleanup(cancel)
	env, c := apiServer(t, ctx)
	return ctx, env, c
}

// newAPISite makes the site with masters and workers (names) in a new
// namespace ns.
func newAPISite(ctx context.Context, t *testing.T, c client.Client, ns string, ex *install.Fake, masters, workers []string) *apiSite {
	t.Helper()
	p, objs := siteObjects(t, ns, masters, workers)
	s := &apiSite{t: t, c: c, ex: ex, events: &eventLog{}, ns: ns, now: time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC), macs: map[string]string{}}
	s.r = &Reconciler{Client: c, Installs: true, Now: func() time.Time { return s.now }, Recorder: s.events,
		Executors: func(*install.Config, ssh.Signer) install.Connector { return ex.Connect }}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range p.Status.Hosts {
		s.addBMH(ctx, h.Name, h.MACAddress)
	}
	p.Status = bpa.ProvisioningStatus{}
	if err := c.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	return s
}

// addBMH makes host name's BareMetalHost, provisioned now. A host new
// to the site gets its entry in the install ConfigMap, as firstboot's
// site apply writes it.
func (s *apiSite) addBMH(ctx context.Context, name, mac string) {
	s.t.Helper()
	s.macs[name] = mac
	var cm corev1.ConfigMap
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: install.ConfigMapName}, &cm); err != nil {
		s.t.Fatal(err)
	}
	cfg, err := install.ParseConfig(cm.Data[install.ConfigKey])
	if err != nil {
		s.t.Fatal(err)
	}
	if _, ok := cfg.Hosts[name]; !ok {
		cfg.Hosts[name] = install.Host{Address: fmt.Sprintf("10.0.1.%d", len(cfg.Hosts)+1), HostKey: "unused by the fake"}
		data, err := cfg.Marshal()
		if err != nil {
			s.t.Fatal(err)
		}
		cm.Data[install.ConfigKey] = data
		if err := s.c.Update(ctx, &cm); err != nil {
			s.t.Fatal(err)
		}
	}
	b := &metal3.BareMetalHost{ObjectMeta: metav1.ObjectMeta{Name: "bmh-" + name, Namespace: s.ns}}
	b.Spec.BootMACAddress, b.Spec.Online = mac, true
	if err := s.c.Create(ctx, b); err != nil {
		s.t.Fatal(err)
	}
	s.provision(ctx, name)
}

// provision writes host name's disk: its BareMetalHost is provisioned
// now, and the fake host's disk is wiped.
func (s *apiSite) provision(ctx context.Context, name string) {
	s.t.Helper()
	var b metal3.BareMetalHost
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: "bmh-" + name}, &b); err != nil {
		s.t.Fatal(err)
	}
	b.Status.OperationalStatus = metal3.OperationalStatusOK
	b.Status.Provisioning.State = metal3.StateProvisioned
	b.Status.OperationHistory.Provision.End = metav1.NewTime(s.now)
	if err := s.c.Status().Update(ctx, &b); err != nil {
		s.t.Fatal(err)
	}
	s.ex.Reprovision(name)
}

// reprovision provisions host name again, an hour on.
func (s *apiSite) reprovision(ctx context.Context, name string) {
	s.t.Helper()
	s.now = s.now.Add(time.Hour)
	s.provision(ctx, name)
}

// setSpec makes masters and workers (names) the Provisioning's hosts.
func (s *apiSite) setSpec(ctx context.Context, masters, workers []string) {
	s.t.Helper()
	p := s.get(ctx)
	p.Spec.Masters, p.Spec.Workers = nil, nil
	for _, n := range masters {
		p.Spec.Masters = append(p.Spec.Masters, map[string]bpa.Master{n: {MACaddress: s.macs[n]}})
	}
	for _, n := range workers {
		p.Spec.Workers = append(p.Spec.Workers, map[string]bpa.Worker{n: {MACaddress: s.macs[n]}})
	}
	if err := s.c.Update(ctx, p); err != nil {
		s.t.Fatal(err)
	}
}

func (s *apiSite) get(ctx context.Context) *bpa.Provisioning {
	s.t.Helper()
	var p bpa.Provisioning
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: "edge"}, &p); err != nil {
		s.t.Fatal(err)
	}
	return &p
}

// reconcile runs one pass as the manager would, and returns the
// Provisioning it left. The status and Events never hold a secret.
func (s *apiSite) reconcile(ctx context.Context) *bpa.Provisioning {
	s.t.Helper()
	if _, err := s.r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: s.ns, Name: "edge"}}); err != nil {
		s.t.Fatalf("Reconcile: %v", err)
	}
	p := s.get(ctx)
	status, _ := json.Marshal(p.Status)
	for _, text := range append(s.events.all(), string(status)) {
		for _, secret := range []string{"abcdef.0123456789abcdef", strings.Repeat("ab", 32), "PRIVATE KEY", "kind: Config"} {
			if strings.Contains(text, secret) {
				s.t.Fatalf("a secret (%q) reached the status or an Event: %s", secret, text)
			}
		}
	}
	return p
}

// installed reconciles until every host is Ready.
func (s *apiSite) installed(ctx context.Context) *bpa.Provisioning {
	s.t.Helper()
	p := s.reconcile(ctx)
	if c := meta.FindStatusCondition(p.Status.Conditions, ConditionClusterReady); c == nil || c.Status != metav1.ConditionTrue {
		s.t.Fatalf("the site's first pass: ClusterReady %+v, hosts %+v", c, p.Status.Hosts)
	}
	return p
}

// kubeconfig is the kubeconfig Secret.
func (s *apiSite) kubeconfig(ctx context.Context) *corev1.Secret {
	s.t.Helper()
	var sec corev1.Secret
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: KubeconfigSecretName("edge")}, &sec); err != nil {
		s.t.Fatal(err)
	}
	return &sec
}

// eventLog records Events as "TYPE REASON NOTE".
type eventLog struct {
	mu   sync.Mutex
	list []string
}

func (l *eventLog) Eventf(_, _ runtime.Object, typ, reason, _, note string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.list = append(l.list, typ+" "+reason+" "+fmt.Sprintf(note, args...))
}

func (l *eventLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.list...)
}

// has reports whether an Event starts with prefix and holds each of
// words.
func (l *eventLog) has(prefix string, words ...string) bool {
	return slices.ContainsFunc(l.all(), func(e string) bool {
		if !strings.HasPrefix(e, prefix) {
			return false
		}
		for _, w := range words {
			if !strings.Contains(e, w) {
				return false
			}
		}
		return true
	})
}

// phaseNames are h's phases that ended, in order.
func phaseNames(h bpa.HostStatus) []string {
	var out []string
	for _, ph := range h.Phases {
		if ph.Finished != nil {
			out = append(out, ph.Name)
		}
	}
	return out
}

// since is the Fake's history after its last entry equal to mark.
func since(ex *install.Fake, mark string) []string {
	h := ex.History()
	for i := len(h) - 1; i >= 0; i-- {
		if h[i] == mark {
			return h[i+1:]
		}
	}
	return nil
}

// before reports whether a comes before b in list, both there.
func before(list []string, a, b string) bool {
	i, j := slices.Index(list, a), slices.Index(list, b)
	return i >= 0 && j >= 0 && i < j
}

// settled checks that a further pass runs no job: the BPA is done.
func settled(ctx context.Context, t *testing.T, s *apiSite) {
	t.Helper()
	n := len(s.ex.History())
	runs := 0
	for _, c := range s.ex.Calls() {
		if c.Kind == "run" {
			runs++
		}
	}
	s.reconcile(ctx)
	for _, c := range s.ex.Calls() {
		if c.Kind == "run" {
			runs--
		}
	}
	if runs != 0 || len(s.ex.History()) != n {
		t.Errorf("a pass after the install ran %d jobs and changed %v", -runs, s.ex.History()[n:])
	}
	noLeaks(t, s.ex)
}

// TestReprovision provisions hosts of an installed cluster again (their
// BareMetalHost's provision time moves on, their disk is wiped) and
// checks what an operator would: the nodes (kubectl get nodes), etcd's
// members, how many clusters kubeadm made, the kubeconfig Secret, the
// hosts' phases and the Events.
func TestReprovision(t *testing.T) {
	ctx, c := apiSites(t)

	// A worker: its stale Node is deleted before it joins again.
	t.Run("worker", func(t *testing.T) {
		ex := &install.Fake{}
		s := newAPISite(ctx, t, c, "reprovision-worker", ex, []string{"m0"}, []string{"w1", "w2"})
		s.installed(ctx)
		s.reprovision(ctx, "w1")
		p := s.reconcile(ctx)
		h := hostOf(p, "w1")
		if h.State != bpa.HostReady || !slices.Equal(phaseNames(h), []string{"connect", "install", "cleanup", "join", "ready"}) {
			t.Errorf("w1 provisioned again: %s with phases %v, want Ready after connect, install, cleanup, join, ready", h.State, phaseNames(h))
		}
		after := since(ex, "w1 provisioned again")
		if !before(after, "node w1 deleted", "node w1 registered") {
			t.Errorf("after w1 was provisioned again the cluster saw %v: want its stale Node deleted, then a new one registered", after)
		}
		if nodes := ex.Nodes(); len(nodes) != 3 || !nodes["w1"] {
			t.Errorf("nodes %v, want m0, w1 and w2 Ready, one w1", nodes)
		}
		if ex.Clusters() != 1 || ex.Runs("w2", bpa.PhaseJoin) != 1 || len(phaseNames(hostOf(p, "w2"))) != 4 {
			t.Errorf("%d clusters made, w2 joined %d times: the others are left as they were", ex.Clusters(), ex.Runs("w2", bpa.PhaseJoin))
		}
		if !s.events.has("Normal PhaseStarted", "host w1: phase cleanup started") || !s.events.has("Normal PhaseFinished", "host w1: phase cleanup finished") {
			t.Errorf("no Events of w1's cleanup: %v", s.events.all())
		}
		settled(ctx, t, s)
	})

	// A later master of a cluster of masters only: its etcd member is
	// removed before it joins again, and etcd lists one member of its name.
	t.Run("later master, MastersOnly", func(t *testing.T) {
		ex := &install.Fake{}
		s := newAPISite(ctx, t, c, "reprovision-master", ex, []string{"m0", "m1", "m2"}, nil)
		s.installed(ctx)
		s.reprovision(ctx, "m1")
		p := s.reconcile(ctx)
		if h := hostOf(p, "m1"); h.State != bpa.HostReady || !slices.Contains(phaseNames(h), "cleanup") {
			t.Errorf("m1 provisioned again: %s with phases %v, want Ready after a cleanup", h.State, phaseNames(h))
		}
		after := since(ex, "m1 provisioned again")
		if !before(after, "etcd member m1 removed", "etcd member m1 added") || !before(after, "node m1 deleted", "node m1 registered") {
			t.Errorf("after m1 was provisioned again the cluster saw %v: want its member removed and its Node deleted, then both made anew", after)
		}
		if m := ex.Members(); !slices.Equal(m, []string{"m0", "m1", "m2"}) {
			t.Errorf("etcd's members %v, want m0, m1, m2, one each", m)
		}
		settled(ctx, t, s)
	})

	// The first master, with other masters in the cluster: never a
	// second init; it rejoins through the next master, and the kubeconfig
	// Secret stays as it was.
	t.Run("first master, MastersOnly", func(t *testing.T) {
		ex := &install.Fake{}
		s := newAPISite(ctx, t, c, "reprovision-first", ex, []string{"m0", "m1", "m2"}, nil)
		s.installed(ctx)
		kc := s.kubeconfig(ctx)
		s.reprovision(ctx, "m0")
		calls := len(ex.Calls())
		p := s.reconcile(ctx)
		if ex.Clusters() != 1 || ex.Runs("m0", bpa.PhaseInit) != 1 {
			t.Fatalf("%d clusters made, init ran %d times on m0: want the one cluster, never a second init", ex.Clusters(), ex.Runs("m0", bpa.PhaseInit))
		}
		if h := hostOf(p, "m0"); h.State != bpa.HostReady || !slices.Equal(phaseNames(h), []string{"connect", "install", "cleanup", "join", "ready"}) {
			t.Errorf("m0 provisioned again: %s with phases %v, want it to rejoin: connect, install, cleanup, join, ready", h.State, phaseNames(h))
		}
		viaM1 := slices.ContainsFunc(ex.Calls()[calls:], func(c install.FakeCall) bool {
			return c.Host == "m1" && c.Kind == "query" && strings.Contains(c.Name, "bootstrap token")
		})
		if !viaM1 {
			t.Error("m0's join token was not made on m1, the master the BPA works through while m0 is away")
		}
		if m := ex.Members(); !slices.Equal(m, []string{"m0", "m1", "m2"}) {
			t.Errorf("etcd's members %v, want m0, m1, m2, one each", m)
		}
		now := s.kubeconfig(ctx)
		if now.ResourceVersion != kc.ResourceVersion || string(now.Data[KubeconfigKey]) != string(kc.Data[KubeconfigKey]) || p.Status.KubeconfigSecret != kc.Name {
			t.Errorf("the kubeconfig Secret changed (resourceVersion %s -> %s): the cluster is the same", kc.ResourceVersion, now.ResourceVersion)
		}
		settled(ctx, t, s)
	})

	// The kubeconfig Secret deleted while the cluster has a master: the
	// cluster lives, and the BPA stores its kubeconfig again, never
	// making a new one.
	t.Run("kubeconfig deleted", func(t *testing.T) {
		ex := &install.Fake{}
		s := newAPISite(ctx, t, c, "reprovision-kubeconfig", ex, []string{"m0"}, nil)
		s.installed(ctx)
		if err := c.Delete(ctx, s.kubeconfig(ctx)); err != nil {
			t.Fatal(err)
		}
		s.reconcile(ctx)
		if got := string(s.kubeconfig(ctx).Data[KubeconfigKey]); ex.Clusters() != 1 || !strings.Contains(got, "# cluster 1") {
			t.Errorf("%d clusters, the Secret holds %q: want cluster 1's kubeconfig stored again", ex.Clusters(), got)
		}
		settled(ctx, t, s)
	})

	// The only master: no init, a refusal that says what to do, nothing
	// else touched. Doing what it says (delete the Secret, provision the
	// worker again) makes a new cluster on purpose.
	t.Run("only master", func(t *testing.T) {
		ex := &install.Fake{}
		s := newAPISite(ctx, t, c, "reprovision-only", ex, []string{"m0"}, []string{"w1"})
		s.installed(ctx)
		kc := s.kubeconfig(ctx)
		s.reprovision(ctx, "m0")
		p := s.reconcile(ctx)
		cond := meta.FindStatusCondition(p.Status.Conditions, ConditionClusterReady)
		if cond == nil || cond.Reason != ReasonOnlyMasterReprovisioned || !strings.Contains(cond.Message, "delete Secret reprovision-only/edge-kubeconfig") {
			t.Fatalf("ClusterReady %+v, want %s saying to delete the kubeconfig Secret", cond, ReasonOnlyMasterReprovisioned)
		}
		if !s.events.has("Warning "+ReasonOnlyMasterReprovisioned, "etcd", "delete Secret reprovision-only/edge-kubeconfig") {
			t.Errorf("no %s Event: %v", ReasonOnlyMasterReprovisioned, s.events.all())
		}
		if after := since(ex, "m0 provisioned again"); len(after) != 0 || ex.Runs("m0", bpa.PhaseInit) != 1 || ex.Runs("m0", bpa.PhaseInstall) != 1 {
			t.Errorf("refused, yet the cluster saw %v and m0 ran init %d and install %d times", after, ex.Runs("m0", bpa.PhaseInit), ex.Runs("m0", bpa.PhaseInstall))
		}
		if w := hostOf(p, "w1"); w.State != bpa.HostReady || s.kubeconfig(ctx).ResourceVersion != kc.ResourceVersion {
			t.Errorf("refused, yet w1 is %s or the kubeconfig Secret changed", w.State)
		}

		if err := c.Delete(ctx, kc); err != nil {
			t.Fatal(err)
		}
		s.reprovision(ctx, "w1")
		p = s.reconcile(ctx)
		if ex.Clusters() != 2 || hostOf(p, "m0").State != bpa.HostReady || hostOf(p, "w1").State != bpa.HostReady {
			t.Errorf("after the Secret's deletion: %d clusters, m0 %s, w1 %s; want a new cluster with both Ready", ex.Clusters(), hostOf(p, "m0").State, hostOf(p, "w1").State)
		}
		if got := string(s.kubeconfig(ctx).Data[KubeconfigKey]); !strings.Contains(got, "# cluster 2") {
			t.Errorf("the kubeconfig Secret holds %q, want the new cluster's", got)
		}
		settled(ctx, t, s)
	})
}
