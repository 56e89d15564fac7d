package controller

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	metal3 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/bootstick/bootstick/internal/bpa/install"
	bpa "github.com/bootstick/bootstick/internal/bpa/v1alpha1"
)

// What the fake hosts show of SR-IOV and QAT.
var (
	withVFs   = install.Hardware{VFs: map[string]int{"eno1": 0, "ens1f0": 64}}
	noVFs     = install.Hardware{VFs: map[string]int{"eno1": 0}}
	withQAT   = install.Hardware{IntelPCI: map[string]string{"0000:6b:00.0": "0x4940"}}
	onlyQATVF = install.Hardware{IntelPCI: map[string]string{"0000:6b:00.1": "0x4941"}}
)

// inspect gives host name's BareMetalHost the hardware its inspection
// found: cpus logical CPUs and mib MiB of memory; with cpus < 0 none (no
// status.hardwareDetails).
func (s *apiSite) inspect(ctx context.Context, name string, cpus, mib int) {
	s.t.Helper()
	var b metal3.BareMetalHost
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: "bmh-" + name}, &b); err != nil {
		s.t.Fatal(err)
	}
	b.Status.HardwareDetails = nil
	if cpus >= 0 {
		b.Status.HardwareDetails = &metal3.HardwareDetails{CPU: metal3.CPU{Arch: "x86_64", Count: cpus}, RAMMebibytes: mib}
	}
	if err := s.c.Status().Update(ctx, &b); err != nil {
		s.t.Fatal(err)
	}
}

// annotate sets an annotation on host name's BareMetalHost.
func (s *apiSite) annotate(ctx context.Context, name, key, value string) {
	s.t.Helper()
	var b metal3.BareMetalHost
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: "bmh-" + name}, &b); err != nil {
		s.t.Fatal(err)
	}
	metav1.SetMetaDataAnnotation(&b.ObjectMeta, key, value)
	if err := s.c.Update(ctx, &b); err != nil {
		s.t.Fatal(err)
	}
}

// require sets host name's requirements in the Provisioning (sriov and
// qat for a worker only, as the CRD has them).
func (s *apiSite) require(ctx context.Context, name string, rq requirements) {
	s.t.Helper()
	p := s.get(ctx)
	for _, m := range p.Spec.Masters {
		if e, ok := m[name]; ok {
			e.CPU, e.Memory = rq.cpu, rq.memory
			m[name] = e
		}
	}
	for _, w := range p.Spec.Workers {
		if e, ok := w[name]; ok {
			e.CPU, e.Memory, e.SRIOV, e.QAT = rq.cpu, rq.memory, rq.sriov, rq.qat
			w[name] = e
		}
	}
	if err := s.c.Update(ctx, p); err != nil {
		s.t.Fatal(err)
	}
}

// count is how many Events start with prefix and hold each of words.
func (l *eventLog) count(prefix string, words ...string) int {
	n := 0
	for _, e := range l.all() {
		if strings.HasPrefix(e, prefix) && !slices.ContainsFunc(words, func(w string) bool { return !strings.Contains(e, w) }) {
			n++
		}
	}
	return n
}

// ranAfterConnect lists the jobs that ran on host: none may run on a
// host that does not fit (connect runs no job).
func ranAfterConnect(ex *install.Fake, host string) []string {
	var out []string
	for _, c := range ex.Calls() {
		if c.Host == host && c.Kind == "run" {
			out = append(out, c.Name)
		}
	}
	return out
}

// condition is p's condition typ as "Status Reason Message".
func condition(p *bpa.Provisioning, typ string) string {
	c := meta.FindStatusCondition(p.Status.Conditions, typ)
	if c == nil {
		return "none"
	}
	return string(c.Status) + " " + c.Reason + " " + c.Message
}

// TestRoleMatchRequirements runs sites of a master and a worker whose
// BareMetalHosts were inspected with 8 CPUs and 16 GiB, against a real
// API server with the fake hosts. A host that fits is installed; one
// that does not is Unfit, its status says what it lacks, a Warning
// Event says it once (a second pass, a minute later, changes nothing:
// no Event, the same lastUpdated), both conditions name it, and no job
// runs on it.
func TestRoleMatchRequirements(t *testing.T) {
	ctx, c := apiSites(t)
	for i, tc := range []struct {
		name string
		// master and worker are the requirements of m0 and w1.
		master, worker requirements
		// on is what the fake w1 shows of SR-IOV and QAT.
		on install.Hardware
		// prepare changes the site before the first pass.
		prepare func(ctx context.Context, s *apiSite)
		// unfit is w1's error, "" when it fits.
		unfit []string
	}{
		{name: "fits", master: requirements{cpu: 4, memory: "8Gi"}, worker: requirements{cpu: 8, memory: "16Gi", sriov: true, qat: true},
			on: install.Hardware{VFs: withVFs.VFs, IntelPCI: withQAT.IntelPCI}},
		{name: "fits in MB", worker: requirements{memory: "17179M"}}, // 16 GiB is 17179.869184 MB
		{name: "lacks cpu", worker: requirements{cpu: 16}, unfit: []string{"lacks cpu 16 (has 8)"}},
		{name: "lacks memory", worker: requirements{cpu: 8, memory: "64Gi"}, unfit: []string{"lacks memory 64Gi (has 16Gi)"}},
		{name: "lacks sriov", worker: requirements{sriov: true}, on: noVFs, unfit: []string{"lacks sriov"}},
		{name: "lacks qat", worker: requirements{sriov: true, qat: true}, on: install.Hardware{VFs: withVFs.VFs, IntelPCI: onlyQATVF.IntelPCI},
			unfit: []string{"lacks qat"}},
		{name: "lacks all", worker: requirements{cpu: 16, memory: "64Gi", sriov: true, qat: true},
			unfit: []string{"lacks cpu 16 (has 8), memory 64Gi (has 16Gi), sriov, qat"}},
		{name: "no hardware details", worker: requirements{cpu: 4, memory: "8Gi"},
			prepare: func(ctx context.Context, s *apiSite) { s.inspect(ctx, "w1", -1, 0) },
			unfit:   []string{"cannot check cpu 4, memory 8Gi: BareMetalHost bmh-w1 has no inspected hardware", "provision it again"}},
		{name: "no hardware details, inspection disabled", worker: requirements{memory: "8Gi", qat: true}, on: withQAT,
			prepare: func(ctx context.Context, s *apiSite) {
				s.inspect(ctx, "w1", -1, 0)
				s.annotate(ctx, "w1", metal3.InspectAnnotationPrefix, metal3.InspectAnnotationValueDisabled)
			},
			unfit: []string{"cannot check memory 8Gi: BareMetalHost bmh-w1 has no inspected hardware, as its inspection is disabled", "inspect.metal3.io/hardwaredetails="}},
		{name: "bad memory", worker: requirements{memory: "lots"}, unfit: []string{`requires memory "lots", which is not a quantity such as 64Gi`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ex := &install.Fake{Hardware: map[string]install.Hardware{"w1": tc.on}}
			s := newAPISite(ctx, t, c, "rolematch-"+string(rune('a'+i)), ex, []string{"m0"}, []string{"w1"})
			for _, n := range []string{"m0", "w1"} {
				s.inspect(ctx, n, 8, 16384)
			}
			s.require(ctx, "m0", tc.master)
			s.require(ctx, "w1", tc.worker)
			if tc.prepare != nil {
				tc.prepare(ctx, s)
			}
			p := s.reconcile(ctx)
			if m := hostOf(p, "m0"); m.State != bpa.HostReady {
				t.Errorf("m0, which fits: %s %q, want Ready", m.State, m.Error)
			}
			w := hostOf(p, "w1")
			if len(tc.unfit) == 0 {
				if w.State != bpa.HostReady || w.Error != "" || ex.Runs("w1", bpa.PhaseJoin) != 1 {
					t.Errorf("w1, which fits: %s %q, joined %d times; want Ready", w.State, w.Error, ex.Runs("w1", bpa.PhaseJoin))
				}
				if n := s.events.count("Warning " + ReasonHostUnfit); n != 0 {
					t.Errorf("%d %s Events for hosts that fit: %v", n, ReasonHostUnfit, s.events.all())
				}
				return
			}
			if w.State != bpa.HostUnfit || !containsAll(w.Error, tc.unfit...) {
				t.Fatalf("w1: %s %q, want Unfit saying %q", w.State, w.Error, tc.unfit)
			}
			if ran := ranAfterConnect(ex, "w1"); len(ran) != 0 || !slices.Equal(phaseNames(w), []string{bpa.PhaseConnect}) {
				t.Errorf("on w1, which does not fit, jobs %v ran and phases %v ended; want only connect, no job", ran, phaseNames(w))
			}
			if cond := condition(p, ConditionClusterReady); !strings.HasPrefix(cond, "False "+ReasonHostsUnfit) || !containsAll(cond, "w1 (", tc.unfit[0]) {
				t.Errorf("ClusterReady %q, want False %s naming w1 and what it lacks", cond, ReasonHostsUnfit)
			}
			if cond := condition(p, ConditionReady); !strings.HasPrefix(cond, "False "+ReasonHostsUnfit) || !containsAll(cond, "w1 (", tc.unfit[0]) {
				t.Errorf("Ready %q, want False %s naming w1 and what it lacks", cond, ReasonHostsUnfit)
			}
			if n := s.events.count("Warning "+ReasonHostUnfit, "host w1 does not fit its worker requirements", tc.unfit[0]); n != 1 {
				t.Errorf("%d %s Events for w1, want 1: %v", n, ReasonHostUnfit, s.events.all())
			}

			// A pass later: the same, said once.
			s.now = s.now.Add(time.Minute)
			p = s.reconcile(ctx)
			again := hostOf(p, "w1")
			if again.State != bpa.HostUnfit || again.Error != w.Error || !again.LastUpdated.Equal(w.LastUpdated) {
				t.Errorf("w1 a pass later: %s %q since %v, want as it was (%q since %v)", again.State, again.Error, again.LastUpdated, w.Error, w.LastUpdated)
			}
			if n := s.events.count("Warning " + ReasonHostUnfit); n != 1 || len(ranAfterConnect(ex, "w1")) != 0 {
				t.Errorf("a pass later: %d %s Events (want 1), jobs %v on w1 (want none)", n, ReasonHostUnfit, ranAfterConnect(ex, "w1"))
			}
			noLeaks(t, ex)
		})
	}
}

// TestRoleMatchFirstMasterUnfit: the first master lacks CPUs. The cluster
// is not made: no init on any host, no join, no kubeconfig, and
// ClusterReady says why. Once its BareMetalHost shows the CPUs (its
// hardware details given again), the cluster is made on it.
func TestRoleMatchFirstMasterUnfit(t *testing.T) {
	ctx, c := apiSites(t)
	ex := &install.Fake{}
	s := newAPISite(ctx, t, c, "rolematch-first", ex, []string{"m0", "m1"}, []string{"w1"})
	for _, n := range []string{"m0", "m1", "w1"} {
		s.inspect(ctx, n, 8, 16384)
	}
	s.require(ctx, "m0", requirements{cpu: 16})
	p := s.reconcile(ctx)
	if m := hostOf(p, "m0"); m.State != bpa.HostUnfit || m.Error != "lacks cpu 16 (has 8)" {
		t.Fatalf("m0: %s %q, want Unfit lacking cpu 16 (has 8)", m.State, m.Error)
	}
	for _, n := range []string{"m0", "m1", "w1"} {
		if ex.Runs(n, bpa.PhaseInit) != 0 || ex.Runs(n, bpa.PhaseJoin) != 0 {
			t.Errorf("%s ran init %d and join %d times under an unfit first master", n, ex.Runs(n, bpa.PhaseInit), ex.Runs(n, bpa.PhaseJoin))
		}
		if h := hostOf(p, n); h.State == bpa.HostReady || inCluster(&h) {
			t.Errorf("%s is %s with phases %v under an unfit first master", n, h.State, phaseNames(h))
		}
	}
	if ex.Clusters() != 0 || len(ex.Nodes()) != 0 || p.Status.KubeconfigSecret != "" {
		t.Errorf("%d clusters, nodes %v, kubeconfig %q: want no cluster", ex.Clusters(), ex.Nodes(), p.Status.KubeconfigSecret)
	}
	if cond := condition(p, ConditionClusterReady); !strings.HasPrefix(cond, "False "+ReasonFirstMasterUnfit) ||
		!containsAll(cond, "the cluster is not made", "master m0", "lacks cpu 16 (has 8)") {
		t.Errorf("ClusterReady %q, want False %s saying m0 lacks cpu", cond, ReasonFirstMasterUnfit)
	}
	if ran := ranAfterConnect(ex, "m0"); len(ran) != 0 {
		t.Errorf("jobs %v ran on m0, which does not fit", ran)
	}

	s.inspect(ctx, "m0", 16, 16384)
	p = s.reconcile(ctx)
	if cond := condition(p, ConditionClusterReady); !strings.HasPrefix(cond, "True") || ex.Clusters() != 1 || ex.Runs("m0", bpa.PhaseInit) != 1 {
		t.Errorf("m0 fits: ClusterReady %q, %d clusters, init ran %d times on m0; want one cluster made on m0, all Ready", cond, ex.Clusters(), ex.Runs("m0", bpa.PhaseInit))
	}
	if !s.events.has("Normal "+ReasonHostFits, "host m0 now fits") {
		t.Errorf("no %s Event for m0: %v", ReasonHostFits, s.events.all())
	}
	settled(ctx, t, s)
}

// TestRoleMatchBecomesFit: a worker that does not fit goes on once it
// does. Its BareMetalHost's hardware details change (as the
// baremetal-operator writes them from the annotation
// inspect.metal3.io/hardwaredetails): each change of what it lacks is
// one Warning Event, and fitting one Normal Event, then it is
// installed and joins. A worker lacking SR-IOV fits once the host shows a
// NIC with virtual functions, on the next look.
func TestRoleMatchBecomesFit(t *testing.T) {
	ctx, c := apiSites(t)

	t.Run("hardware details", func(t *testing.T) {
		ex := &install.Fake{}
		s := newAPISite(ctx, t, c, "rolematch-details", ex, []string{"m0"}, []string{"w1"})
		s.inspect(ctx, "m0", 8, 16384)
		s.inspect(ctx, "w1", -1, 0)
		s.require(ctx, "w1", requirements{cpu: 16, memory: "64Gi"})
		steps := []struct {
			cpus, mib int
			want      string
		}{
			{-1, 0, "cannot check cpu 16, memory 64Gi: BareMetalHost bmh-w1 has no inspected hardware"},
			{8, 16384, "lacks cpu 16 (has 8), memory 64Gi (has 16Gi)"},
			{32, 16384, "lacks memory 64Gi (has 16Gi)"},
		}
		for i, st := range steps {
			s.inspect(ctx, "w1", st.cpus, st.mib)
			s.now = s.now.Add(time.Minute)
			w := hostOf(s.reconcile(ctx), "w1")
			if w.State != bpa.HostUnfit || !strings.HasPrefix(w.Error, st.want) {
				t.Fatalf("step %d: w1 %s %q, want Unfit saying %q", i, w.State, w.Error, st.want)
			}
			if n := s.events.count("Warning " + ReasonHostUnfit); n != i+1 {
				t.Errorf("step %d: %d %s Events, want %d (one per change): %v", i, n, ReasonHostUnfit, i+1, s.events.all())
			}
		}
		if ran := ranAfterConnect(ex, "w1"); len(ran) != 0 {
			t.Errorf("jobs %v ran on w1 while it did not fit", ran)
		}
		s.inspect(ctx, "w1", 32, 65536)
		s.now = s.now.Add(time.Minute)
		w := hostOf(s.reconcile(ctx), "w1")
		if w.State != bpa.HostReady || w.Error != "" || !slices.Equal(phaseNames(w), []string{"connect", "install", "join", "ready"}) {
			t.Errorf("w1 fits: %s %q with phases %v, want Ready after connect, install, join, ready", w.State, w.Error, phaseNames(w))
		}
		if !s.events.has("Normal "+ReasonHostFits, "host w1 now fits its worker requirements") {
			t.Errorf("no %s Event: %v", ReasonHostFits, s.events.all())
		}
		settled(ctx, t, s)
	})

	t.Run("sriov", func(t *testing.T) {
		ex := &install.Fake{Hardware: map[string]install.Hardware{"w1": noVFs}}
		s := newAPISite(ctx, t, c, "rolematch-sriov", ex, []string{"m0"}, []string{"w1"})
		s.require(ctx, "w1", requirements{sriov: true})
		again, err := s.r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: s.ns, Name: "edge"}})
		if err != nil {
			t.Fatal(err)
		}
		if w := hostOf(s.get(ctx), "w1"); w.State != bpa.HostUnfit || w.Error != "lacks sriov" {
			t.Fatalf("w1: %s %q, want Unfit lacking sriov", w.State, w.Error)
		}
		if again.RequeueAfter <= 0 || again.RequeueAfter > UnfitPoll {
			t.Errorf("the pass asks for the next after %v: a host lacking SR-IOV is looked at again within %v", again.RequeueAfter, UnfitPoll)
		}
		ex.SetHardware("w1", withVFs)
		s.now = s.now.Add(UnfitPoll)
		if w := hostOf(s.reconcile(ctx), "w1"); w.State != bpa.HostReady {
			t.Errorf("w1 with SR-IOV: %s %q, want Ready", w.State, w.Error)
		}
		settled(ctx, t, s)
	})
}

// TestRoleMatchLacks: what a host lacks, in words, from its
// BareMetalHost's inspection and what its host shows; and what a host
// named as master and worker requires (both entries).
func TestRoleMatchLacks(t *testing.T) {
	inspected := func(cpus, mib int) *metal3.BareMetalHost {
		b := &metal3.BareMetalHost{ObjectMeta: metav1.ObjectMeta{Name: "bmh-h"}}
		b.Status.HardwareDetails = &metal3.HardwareDetails{CPU: metal3.CPU{Count: cpus}, RAMMebibytes: mib}
		return b
	}
	external := &metal3.BareMetalHost{ObjectMeta: metav1.ObjectMeta{Name: "bmh-h"}}
	external.Spec.ExternallyProvisioned = true
	modeOff := &metal3.BareMetalHost{ObjectMeta: metav1.ObjectMeta{Name: "bmh-h"}}
	modeOff.Spec.InspectionMode = metal3.InspectionModeDisabled
	for _, c := range []struct {
		name string
		rq   requirements
		b    *metal3.BareMetalHost
		hw   *install.Hardware
		want []string // "" alone: fits
	}{
		{"no requirements", requirements{}, nil, nil, []string{""}},
		{"exact fit", requirements{cpu: 8, memory: "16Gi"}, inspected(8, 16384), nil, []string{""}},
		{"memory odd size", requirements{memory: "64Gi"}, inspected(8, 65000), nil, []string{"lacks memory 64Gi (has 65000Mi)"}},
		// 64G is 61035.16 MiB.
		{"memory in G", requirements{memory: "64G"}, inspected(8, 61035), nil, []string{"lacks memory 64G (has 61035Mi)"}},
		{"memory in G fits", requirements{memory: "64G"}, inspected(8, 61036), nil, []string{""}},
		{"sriov and qat on the host", requirements{sriov: true, qat: true}, nil, &install.Hardware{VFs: withVFs.VFs, IntelPCI: withQAT.IntelPCI}, []string{""}},
		{"externally provisioned", requirements{cpu: 2}, external, nil,
			[]string{"cannot check cpu 2: BareMetalHost bmh-h has no inspected hardware, as it is externally provisioned", "inspect.metal3.io=disabled and inspect.metal3.io/hardwaredetails="}},
		{"inspectionMode disabled", requirements{cpu: 2}, modeOff, nil, []string{"as its inspection is disabled"}},
		{"unknown and lacking", requirements{cpu: 2, qat: true}, external, &install.Hardware{}, []string{"lacks qat; cannot check cpu 2: "}},
	} {
		got := lacks(c.rq, c.b, c.hw)
		if c.want[0] == "" {
			if got != "" {
				t.Errorf("%s: %q, want it to fit", c.name, got)
			}
			continue
		}
		if !containsAll(got, c.want...) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}

	spec := bpa.ProvisioningSpec{
		Masters: []map[string]bpa.Master{{"h": {CPU: 16, Memory: "32Gi"}}},
		Workers: []map[string]bpa.Worker{{"h": {CPU: 8, Memory: "64Gi", QAT: true}}, {"w": {SRIOV: true}}},
	}
	if got, want := requirementsOf(spec, "h"), (requirements{cpu: 16, memory: "64Gi", qat: true}); got != want {
		t.Errorf("a host named as master and worker requires %+v, want %+v (both entries)", got, want)
	}
	if got := requirementsOf(spec, "w"); got != (requirements{sriov: true}) {
		t.Errorf("w requires %+v", got)
	}
}

func containsAll(s string, words ...string) bool {
	for _, w := range words {
		if !strings.Contains(s, w) {
			return false
		}
	}
	return true
}
