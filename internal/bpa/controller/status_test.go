package controller

import (
	"slices"
	"strings"
	"testing"
	"time"

	metal3 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	bpa "github.com/bootstick/bootstick/internal/bpa/v1alpha1"
)

func bmh(name, mac string, state metal3.ProvisioningState) metal3.BareMetalHost {
	b := metal3.BareMetalHost{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "metal3"}}
	b.Spec.BootMACAddress = mac
	b.Status.Provisioning.State = state
	b.Status.OperationalStatus = metal3.OperationalStatusOK
	return b
}

func prov(masters, workers map[string]string) *bpa.Provisioning {
	p := &bpa.Provisioning{ObjectMeta: metav1.ObjectMeta{Name: "site", Namespace: "metal3", Generation: 3}}
	for n, mac := range masters {
		p.Spec.Masters = append(p.Spec.Masters, map[string]bpa.Master{n: {MACaddress: mac}})
	}
	for n, mac := range workers {
		p.Spec.Workers = append(p.Spec.Workers, map[string]bpa.Worker{n: {MACaddress: mac}})
	}
	return p
}

func TestHostStatuses(t *testing.T) {
	failed := bmh("w1", "52:54:00:00:00:02", metal3.StateProvisioning)
	failed.Status.OperationalStatus = metal3.OperationalStatusError
	failed.Status.ErrorType = metal3.ProvisioningError
	failed.Status.ErrorMessage = "image download failed"
	deleting := bmh("m1", "52:54:00:00:00:01", metal3.StateProvisioned)
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}

	type want struct {
		name, role, bmh string
		state           bpa.HostState
		err             string // substring; "" means no error
	}
	tests := []struct {
		name             string
		masters, workers map[string]string
		bmhs             []metal3.BareMetalHost
		want             []want
		ready            metav1.ConditionStatus
		reason           string
	}{
		{
			name:    "all states map",
			masters: map[string]string{"m1": "52:54:00:00:00:01"},
			workers: map[string]string{"w1": "52:54:00:00:00:02", "w2": "52:54:00:00:00:03", "w3": "52:54:00:00:00:04"},
			bmhs: []metal3.BareMetalHost{bmh("bmh-m1", "52:54:00:00:00:01", metal3.StateProvisioned),
				bmh("bmh-w1", "52:54:00:00:00:02", metal3.StateProvisioning),
				bmh("bmh-w2", "52:54:00:00:00:03", metal3.StateAvailable),
				bmh("bmh-w3", "52:54:00:00:00:04", metal3.StateExternallyProvisioned)},
			want: []want{{"m1", "master", "bmh-m1", bpa.HostProvisioned, ""}, {"w1", "worker", "bmh-w1", bpa.HostProvisioning, ""},
				{"w2", "worker", "bmh-w2", bpa.HostMatched, ""}, {"w3", "worker", "bmh-w3", bpa.HostProvisioned, ""}},
			ready: metav1.ConditionFalse, reason: "Waiting",
		},
		{
			name:    "MAC case and dashes do not matter",
			masters: map[string]string{"m1": "52-54-00-AA-BB-CC"},
			bmhs:    []metal3.BareMetalHost{bmh("x", "52:54:00:aa:bb:cc", metal3.StateProvisioned)},
			want:    []want{{"m1", "master", "x", bpa.HostProvisioned, ""}},
			ready:   metav1.ConditionTrue, reason: "AllProvisioned",
		},
		{
			name:    "no BareMetalHost has the MAC",
			masters: map[string]string{"m1": "52:54:00:00:00:01"},
			bmhs:    []metal3.BareMetalHost{bmh("other", "52:54:00:00:00:99", metal3.StateReady)},
			want:    []want{{"m1", "master", "", bpa.HostPending, "no BareMetalHost in namespace metal3 has boot MAC address 52:54:00:00:00:01"}},
			ready:   metav1.ConditionFalse, reason: "Waiting",
		},
		{
			name:    "a BareMetalHost being deleted does not match",
			masters: map[string]string{"m1": "52:54:00:00:00:01"},
			bmhs:    []metal3.BareMetalHost{deleting},
			want:    []want{{"m1", "master", "", bpa.HostPending, "no BareMetalHost"}},
			ready:   metav1.ConditionFalse, reason: "Waiting",
		},
		{
			name:    "two BareMetalHosts with one MAC",
			masters: map[string]string{"m1": "52:54:00:00:00:01"},
			bmhs:    []metal3.BareMetalHost{bmh("b", "52:54:00:00:00:01", metal3.StateReady), bmh("a", "52:54:00:00:00:01", metal3.StateReady)},
			want:    []want{{"m1", "master", "", bpa.HostError, "BareMetalHosts a, b all have boot MAC address 52:54:00:00:00:01"}},
			ready:   metav1.ConditionFalse, reason: "HostError",
		},
		{
			name:    "two hosts with one MAC",
			masters: map[string]string{"m1": "52:54:00:00:00:01"},
			workers: map[string]string{"w1": "52:54:00:00:00:01"},
			bmhs:    []metal3.BareMetalHost{bmh("a", "52:54:00:00:00:01", metal3.StateReady)},
			want: []want{{"m1", "master", "", bpa.HostError, "hosts m1, w1 have the same mac-address"},
				{"w1", "worker", "", bpa.HostError, "hosts m1, w1 have the same mac-address"}},
			ready: metav1.ConditionFalse, reason: "HostError",
		},
		{
			name:    "a host named as master and worker with two MACs",
			masters: map[string]string{"h": "52:54:00:00:00:01"},
			workers: map[string]string{"h": "52:54:00:00:00:02"},
			want:    []want{{"h", "master", "", bpa.HostError, "named as a master with mac-address 52:54:00:00:00:01 and as a worker with 52:54:00:00:00:02"}},
			ready:   metav1.ConditionFalse, reason: "HostError",
		},
		{
			name:    "a host named as master and worker is one master",
			masters: map[string]string{"h": "52:54:00:00:00:01"},
			workers: map[string]string{"h": "52:54:00:00:00:01", "w": "52:54:00:00:00:02"},
			bmhs:    []metal3.BareMetalHost{bmh("a", "52:54:00:00:00:01", metal3.StateReady), bmh("b", "52:54:00:00:00:02", metal3.StateReady)},
			want:    []want{{"h", "master", "a", bpa.HostMatched, ""}, {"w", "worker", "b", bpa.HostMatched, ""}},
			ready:   metav1.ConditionFalse, reason: "Waiting",
		},
		{
			name:    "no MAC",
			workers: map[string]string{"w1": ""},
			want:    []want{{"w1", "worker", "", bpa.HostError, "host w1 has no mac-address"}},
			ready:   metav1.ConditionFalse, reason: "HostError",
		},
		{
			name:    "the BareMetalHost's error is reported",
			workers: map[string]string{"w1": "52:54:00:00:00:02"},
			bmhs:    []metal3.BareMetalHost{failed},
			want:    []want{{"w1", "worker", "w1", bpa.HostError, "BareMetalHost w1: provisioning error: image download failed"}},
			ready:   metav1.ConditionFalse, reason: "HostError",
		},
		{
			name:  "no hosts",
			want:  []want{},
			ready: metav1.ConditionFalse, reason: "NoHosts",
		},
	}
	now := metav1.NewTime(time.Unix(1000, 0))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := prov(tt.masters, tt.workers)
			st := Status(p, tt.bmhs, now)
			if len(st.Hosts) != len(tt.want) {
				t.Fatalf("hosts = %+v, want %d", st.Hosts, len(tt.want))
			}
			for i, w := range tt.want {
				h := st.Hosts[i]
				if h.Name != w.name || h.Role != w.role || h.BareMetalHost != w.bmh || h.State != w.state {
					t.Errorf("hosts[%d] = %s/%s bmh=%q state=%s, want %s/%s bmh=%q state=%s", i, h.Name, h.Role, h.BareMetalHost, h.State, w.name, w.role, w.bmh, w.state)
				}
				if (w.err == "") != (h.Error == "") || !strings.Contains(h.Error, w.err) {
					t.Errorf("hosts[%d].error = %q, want %q", i, h.Error, w.err)
				}
				if h.LastUpdated == nil || !h.LastUpdated.Equal(&now) {
					t.Errorf("hosts[%d].lastUpdated = %v", i, h.LastUpdated)
				}
			}
			if st.ObservedGeneration != 3 {
				t.Errorf("observedGeneration = %d", st.ObservedGeneration)
			}
			if len(st.Conditions) != 1 || st.Conditions[0].Status != tt.ready || st.Conditions[0].Reason != tt.reason {
				t.Errorf("conditions = %+v, want Ready=%s %s", st.Conditions, tt.ready, tt.reason)
			}
		})
	}
}

// TestLastUpdatedFollowsState: the time moves only when a host's state
// changes, so a status computed twice from the same objects is equal (and
// the reconciler writes nothing).
func TestLastUpdatedFollowsState(t *testing.T) {
	p := prov(map[string]string{"m1": "52:54:00:00:00:01"}, map[string]string{"w1": "52:54:00:00:00:02"})
	bmhs := []metal3.BareMetalHost{bmh("m1", "52:54:00:00:00:01", metal3.StateReady), bmh("w1", "52:54:00:00:00:02", metal3.StateReady)}
	t1, t2 := metav1.NewTime(time.Unix(1000, 0)), metav1.NewTime(time.Unix(2000, 0))
	p.Status = Status(p, bmhs, t1)

	same := Status(p, bmhs, t2)
	for _, h := range same.Hosts {
		if !h.LastUpdated.Equal(&t1) {
			t.Errorf("%s: lastUpdated moved to %v with no change", h.Name, h.LastUpdated)
		}
	}
	if !same.Conditions[0].LastTransitionTime.Equal(&t1) {
		t.Errorf("Ready moved to %v with no change", same.Conditions[0].LastTransitionTime)
	}

	bmhs[1].Status.Provisioning.State = metal3.StateProvisioning
	moved := Status(p, bmhs, t2)
	if !moved.Hosts[0].LastUpdated.Equal(&t1) || !moved.Hosts[1].LastUpdated.Equal(&t2) {
		t.Errorf("lastUpdated = %v, %v; want only w1's to move", moved.Hosts[0].LastUpdated, moved.Hosts[1].LastUpdated)
	}
}

// TestInstallFollowsTheProvisioning: the install's progress is kept for
// the provisioning it was made for, and dropped when the host is
// provisioned again (its disk is new: everything is installed again).
func TestInstallFollowsTheProvisioning(t *testing.T) {
	t1 := metav1.NewTime(time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC))
	t2 := metav1.NewTime(t1.Add(time.Hour))
	done := metav1.NewTime(t1.Add(time.Minute))
	p := prov(map[string]string{"m1": "52:54:00:00:00:01"}, nil)
	p.Status.Hosts = []bpa.HostStatus{{Name: "m1", Role: RoleMaster, State: bpa.HostReady, ProvisionedAt: &t1, Address: "10.0.0.5",
		Phases: []bpa.Phase{{Name: bpa.PhaseConnect, Started: t1, Finished: &done}}}}
	b := bmh("bmh-m1", "52:54:00:00:00:01", metal3.StateProvisioned)
	now := metav1.NewTime(t2.Add(time.Minute))

	b.Status.OperationHistory.Provision.End = t1
	hs := HostStatuses(p, []metal3.BareMetalHost{b}, now)
	if hs[0].State != bpa.HostReady || len(hs[0].Phases) != 1 || hs[0].Address != "10.0.0.5" {
		t.Errorf("the same provisioning: %+v, want Ready with its phases", hs[0])
	}

	b.Status.OperationHistory.Provision.End = t2
	hs = HostStatuses(p, []metal3.BareMetalHost{b}, now)
	if hs[0].State != bpa.HostProvisioned || len(hs[0].Phases) != 0 || !hs[0].ProvisionedAt.Equal(&t2) {
		t.Errorf("provisioned again: %+v, want Provisioned with no phases, provisioned at %s", hs[0], t2)
	}

	// An install error is kept too (the host has its OS; the BPA retries).
	b.Status.OperationHistory.Provision.End = t1
	p.Status.Hosts[0].State, p.Status.Hosts[0].Error = bpa.HostError, "install: exit status 1"
	hs = HostStatuses(p, []metal3.BareMetalHost{b}, now)
	if hs[0].State != bpa.HostError || hs[0].Error == "" {
		t.Errorf("a failed install: %+v", hs[0])
	}
	if c := readyCondition(hs, 1); c.Status != metav1.ConditionTrue {
		t.Errorf("a host whose install failed is still provisioned: %+v", c)
	}
}

// TestSchedulableMastersOnly: every master of a cluster with no worker
// runs workloads; with workers, only a master also named as a worker does.
func TestSchedulableMastersOnly(t *testing.T) {
	for _, c := range []struct {
		name             string
		masters, workers map[string]string
		want             string
	}{
		{"one server", map[string]string{"m1": "52:54:00:00:00:01"}, nil, "m1"},
		{"three masters, no worker", map[string]string{"m1": "52:54:00:00:00:01", "m2": "52:54:00:00:00:02", "m3": "52:54:00:00:00:03"}, nil, "m1,m2,m3"},
		{"a master and a worker", map[string]string{"m1": "52:54:00:00:00:01"}, map[string]string{"w1": "52:54:00:00:00:02"}, ""},
		{"masters only, one named as a worker too", map[string]string{"m1": "52:54:00:00:00:01", "m2": "52:54:00:00:00:02"}, map[string]string{"m2": "52:54:00:00:00:02"}, "m1,m2"},
		{"a master named as a worker too, and a worker", map[string]string{"m1": "52:54:00:00:00:01", "m2": "52:54:00:00:00:02"}, map[string]string{"m2": "52:54:00:00:00:02", "w1": "52:54:00:00:00:03"}, "m2"},
	} {
		got := Schedulable(prov(c.masters, c.workers).Spec)
		var names []string
		for n, ok := range got {
			if ok {
				names = append(names, n)
			}
		}
		slices.Sort(names)
		if strings.Join(names, ",") != c.want {
			t.Errorf("%s: schedulable masters %v, want %s", c.name, names, c.want)
		}
	}
}
