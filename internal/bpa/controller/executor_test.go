package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/bootstick/bootstick/internal/bpa/install"
	bpa "github.com/bootstick/bootstick/internal/bpa/v1alpha1"
	"github.com/bootstick/bootstick/internal/sshkeys"
	"github.com/bootstick/bootstick/internal/testctx"
)

// fakeSite is a Provisioning whose hosts are all provisioned, in an API
// of controller-runtime's fake client, installed through install.Fake.
type fakeSite struct {
	t    *testing.T
	c    client.Client
	r    *Reconciler
	ex   *install.Fake
	now  time.Time
	name client.ObjectKey
}

// newFakeSite makes the site with masters and workers (names).
func newFakeSite(t *testing.T, ex *install.Fake, masters, workers []string) *fakeSite {
	t.Helper()
	s, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	p, objs := siteObjects(t, "metal3", masters, workers)
	c := fake.NewClientBuilder().WithScheme(s).WithStatusSubresource(&bpa.Provisioning{}).WithObjects(append(objs, p)...).Build()
	f := &fakeSite{t: t, c: c, ex: ex, now: time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC), name: client.ObjectKeyFromObject(p)}
	f.r = &Reconciler{Client: c, Installs: true, Now: func() time.Time { return f.now },
		Executors: func(*install.Config, ssh.Signer) install.Connector { return ex.Connect }}
	return f
}

// siteObjects are Provisioning "edge" in namespace ns with masters and
// workers (names), each host's status Provisioned, and the install
// ConfigMap and SSH key Secret its install reads.
func siteObjects(t *testing.T, ns string, masters, workers []string) (*bpa.Provisioning, []client.Object) {
	t.Helper()
	key, err := sshkeys.Generate(nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := installConfig(map[string]install.Host{})
	p := &bpa.Provisioning{ObjectMeta: metav1.ObjectMeta{Name: "edge", Namespace: ns}}
	add := func(name, role string, i int) {
		mac := "52:54:00:00:00:" + string(rune('a'+i)) + "0"
		cfg.Hosts[name] = install.Host{Address: "10.0.0." + string(rune('1'+i)), HostKey: "unused by the fake"}
		p.Status.Hosts = append(p.Status.Hosts, bpa.HostStatus{Name: name, Role: role, MACAddress: mac, BareMetalHost: "bmh-" + name, State: bpa.HostProvisioned})
		if role == RoleMaster {
			p.Spec.Masters = append(p.Spec.Masters, map[string]bpa.Master{name: {MACaddress: mac}})
		} else {
			p.Spec.Workers = append(p.Spec.Workers, map[string]bpa.Worker{name: {MACaddress: mac}})
		}
	}
	for i, n := range masters {
		add(n, RoleMaster, i)
	}
	for i, n := range workers {
		add(n, RoleWorker, len(masters)+i)
	}
	data, err := cfg.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return p, []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: install.ConfigMapName, Namespace: ns}, Data: map[string]string{install.ConfigKey: data}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: SSHKeySecret, Namespace: ns}, Type: corev1.SecretTypeSSHAuth,
			Data: map[string][]byte{corev1.SSHAuthPrivateKey: key.Private}},
	}
}

// pass runs one install pass over the Provisioning as stored, and
// returns it as the pass left it.
func (f *fakeSite) pass(ctx context.Context) (*bpa.Provisioning, time.Duration) {
	f.t.Helper()
	var p bpa.Provisioning
	if err := f.c.Get(ctx, f.name, &p); err != nil {
		f.t.Fatal(err)
	}
	again, err := f.r.Install(ctx, &p, nil)
	if err != nil {
		f.t.Fatalf("Install: %v", err)
	}
	return &p, again
}

// untilReady runs passes until every host is Ready (at most eleven), and
// fails the test when the cluster has not formed by then.
func (f *fakeSite) untilReady(ctx context.Context) *bpa.Provisioning {
	f.t.Helper()
	ready := func(p *bpa.Provisioning) bool {
		for _, h := range p.Status.Hosts {
			if h.State != bpa.HostReady {
				return false
			}
		}
		return true
	}
	p, _ := f.pass(ctx)
	for i := 0; i < 10 && !ready(p); i++ {
		p, _ = f.pass(ctx)
	}
	if !ready(p) {
		f.t.Fatalf("the cluster did not form: %+v", p.Status.Hosts)
	}
	return p
}

func hostOf(p *bpa.Provisioning, name string) bpa.HostStatus {
	for _, h := range p.Status.Hosts {
		if h.Name == name {
			return h
		}
	}
	return bpa.HostStatus{}
}

// noLeaks fails the test when a connection the pass opened is still
// open.
func noLeaks(t *testing.T, ex *install.Fake) {
	t.Helper()
	open := map[string]int{}
	for _, c := range ex.Calls() {
		switch c.Kind {
		case "connect":
			open[c.Host]++
		case "close":
			open[c.Host]--
		}
	}
	for h, n := range open {
		if n != 0 {
			t.Errorf("%d connections to %s left open", n, h)
		}
	}
}

// TestSilentHostTimesOutWhileOthersInstall: a worker falls silent during
// its install. The others do not wait for it: the master makes the
// cluster and the other worker joins and turns Ready while the silent
// one still runs (it passes its deadline only once the other worker has
// joined). The silent worker then fails on its deadline, named with its
// phase, and waits out a backoff; no connection is left open.
func TestSilentHostTimesOutWhileOthersInstall(t *testing.T) {
	ctx, cancel := testctx.New(t, time.Minute)
	defer cancel()
	ex := &install.Fake{Jobs: map[string]map[string]install.FakeJob{"worker-1": {bpa.PhaseInstall: {Silent: true}}}}
	ex.OnRun = func(host, phase string, err error) {
		if host == "worker-2" && phase == bpa.PhaseJoin && err == nil {
			ex.Expire("worker-1")
		}
	}
	site := newFakeSite(t, ex, []string{"master-0"}, []string{"worker-1", "worker-2"})
	p, again := site.pass(ctx)

	for _, n := range []string{"master-0", "worker-2"} {
		if h := hostOf(p, n); h.State != bpa.HostReady || h.Error != "" {
			t.Errorf("%s beside a silent host: %s %q, want Ready", n, h.State, h.Error)
		}
	}
	h := hostOf(p, "worker-1")
	if h.State != bpa.HostError || !strings.Contains(h.Error, "install on worker-1 did not end within its deadline of 20m0s") ||
		h.NextRetry == nil || phaseDone(&h, bpa.PhaseInstall) {
		t.Errorf("the silent host: %s %q, want Error on its install's deadline, retried later", h.State, h.Error)
	}
	if again <= 0 || again > BackoffMax {
		t.Errorf("the pass asks to run again after %v, want the silent host's backoff", again)
	}
	if p.Status.KubeconfigSecret == "" {
		t.Error("no kubeconfig Secret recorded")
	}
	noLeaks(t, ex)
}

// TestCutConnectionAttachesOnTheNextPass: a worker's connection is cut
// while its install runs. It is Unreachable; the next pass, after its
// backoff, attaches to the install that went on on the host instead of
// running it again, and the worker joins.
func TestCutConnectionAttachesOnTheNextPass(t *testing.T) {
	ctx, cancel := testctx.New(t, time.Minute)
	defer cancel()
	ex := &install.Fake{Jobs: map[string]map[string]install.FakeJob{"worker-1": {bpa.PhaseInstall: {Cut: true}}}}
	site := newFakeSite(t, ex, []string{"master-0"}, []string{"worker-1"})
	p, _ := site.pass(ctx)
	if h := hostOf(p, "worker-1"); h.State != bpa.HostUnreachable || !strings.Contains(h.Error, "cut") || h.NextRetry == nil {
		t.Fatalf("a host whose connection was cut: %s %q", h.State, h.Error)
	}
	site.now = hostOf(p, "worker-1").NextRetry.Add(time.Second)
	p, _ = site.pass(ctx)
	if h := hostOf(p, "worker-1"); h.State != bpa.HostReady {
		t.Errorf("after the cut, the next pass: %s %q, want Ready", h.State, h.Error)
	}
	if n := ex.Runs("worker-1", bpa.PhaseInstall); n != 1 {
		t.Errorf("the install ran %d times over a cut connection and the next pass, want once", n)
	}
	attached := false
	for _, c := range ex.Calls() {
		attached = attached || (c.Host == "worker-1" && c.Kind == "run" && c.Name == bpa.PhaseInstall && c.Attached)
	}
	if !attached {
		t.Error("the next pass did not attach to the install")
	}
	noLeaks(t, ex)
}

// TestPhasesEndOnObservedState: an init or a join whose job ended well
// is not done until the cluster shows it: an API server with its addons
// and bootstrap RBAC, a Ready node. When that never shows, the phase
// fails at its deadline with what is missing, and the host is not
// recorded in the cluster.
func TestPhasesEndOnObservedState(t *testing.T) {
	for _, c := range []struct {
		name, host, phase, want string
		masters, workers        []string
	}{
		{"init without an API", "master-0", bpa.PhaseInit, "init on master-0 did not end within its deadline of 1ms: still the API server does not answer", []string{"master-0"}, nil},
		{"join without a Ready node", "worker-1", bpa.PhaseJoin, "join on worker-1 did not end within its deadline of 1ms: still node worker-1 is not Ready (Ready=False)", []string{"master-0"}, []string{"worker-1"}},
		{"master join without its etcd member", "master-1", bpa.PhaseJoin, "etcd lists no started member master-1", []string{"master-0", "master-1"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			old := PhaseDeadlines[c.phase]
			PhaseDeadlines[c.phase] = time.Millisecond
			t.Cleanup(func() { PhaseDeadlines[c.phase] = old })
			ctx, cancel := testctx.New(t, time.Minute)
			defer cancel()
			ex := &install.Fake{Jobs: map[string]map[string]install.FakeJob{c.host: {c.phase: {Unobserved: true}}}}
			site := newFakeSite(t, ex, c.masters, c.workers)
			p, _ := site.pass(ctx)
			h := hostOf(p, c.host)
			if h.State != bpa.HostError || !strings.Contains(h.Error, c.want) || inCluster(&h) {
				t.Errorf("%s: %s %q, want Error with %q, not in the cluster", c.host, h.State, h.Error, c.want)
			}
			if n := ex.Runs(c.host, c.phase); n != 1 {
				t.Errorf("the %s job ran %d times, want once", c.phase, n)
			}
			noLeaks(t, ex)
		})
	}
}
