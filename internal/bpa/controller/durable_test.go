package controller

import (
	"encoding/json"
	"testing"
	"time"

	metal3 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	bpa "github.com/bootstick/bootstick/internal/bpa/v1alpha1"
)

// installedHost is m1's status after the BPA made it the cluster's first
// master, for the provisioning that ended at t.
func installedHost(t metav1.Time) bpa.HostStatus {
	done := metav1.NewTime(t.Add(time.Minute))
	return bpa.HostStatus{Name: "m1", Role: RoleMaster, MACAddress: "52:54:00:00:00:01", BareMetalHost: "bmh-m1",
		State: bpa.HostReady, ProvisionedAt: &t, Address: "10.0.0.5", LastUpdated: &done,
		Phases: []bpa.Phase{{Name: bpa.PhaseConnect, Started: t, Finished: &done}, {Name: bpa.PhaseInstall, Started: t, Finished: &done},
			{Name: bpa.PhaseInit, Started: t, Finished: &done}, {Name: bpa.PhaseReady, Started: t, Finished: &done}}}
}

// TestBMCErrorKeepsInstalledHost: what the BPA did on a host (its phases,
// address, state) stays in the status through anything the
// baremetal-operator reports that does not write the host's disk (issue
// 26: one BMC error wiped it, and every phase ran again), and is dropped
// when the disk was written or wiped since.
func TestBMCErrorKeepsInstalledHost(t *testing.T) {
	t1 := metav1.NewTime(time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC))
	t2 := metav1.NewTime(t1.Add(time.Hour))
	now := metav1.NewTime(t2.Add(time.Hour))
	bmcError := func(b *metal3.BareMetalHost) {
		b.Status.OperationalStatus = metal3.OperationalStatusError
		b.Status.ErrorType = metal3.PowerManagementError
		b.Status.ErrorMessage = "Failed to get power state for node: IPMI call failed: power status."
		b.Status.PoweredOn = false
	}
	for _, c := range []struct {
		name string
		bmh  func(b *metal3.BareMetalHost)
		// noHistory: the operator recorded no provision time, before or
		// now; the BareMetalHost's age stands in, in the status too.
		noHistory bool
		keep      bool
		// state is the host's state when the install is not kept.
		state bpa.HostState
	}{
		{name: "nothing happened", bmh: func(*metal3.BareMetalHost) {}, keep: true},
		{name: "power state unknown", bmh: bmcError, keep: true},
		{name: "registration error (Ironic lost its node and re-adopts)", bmh: func(b *metal3.BareMetalHost) {
			b.Status.OperationalStatus, b.Status.ErrorType = metal3.OperationalStatusError, metal3.RegistrationError
			b.Status.Provisioning.ID = "a-new-ironic-node-uuid"
		}, keep: true},
		{name: "detached", bmh: func(b *metal3.BareMetalHost) { b.Status.OperationalStatus = metal3.OperationalStatusDetached }, keep: true},
		{name: "no state yet, its status being restored after a move", bmh: func(b *metal3.BareMetalHost) {
			saved, err := json.Marshal(b.Status)
			if err != nil {
				t.Fatal(err)
			}
			b.Annotations = map[string]string{metal3.StatusAnnotation: string(saved)}
			b.Status = metal3.BareMetalHostStatus{}
		}, keep: true},
		{name: "no state yet, restoring the status of a later provisioning", bmh: func(b *metal3.BareMetalHost) {
			b.Status.OperationHistory.Provision.End = t2
			saved, err := json.Marshal(b.Status)
			if err != nil {
				t.Fatal(err)
			}
			b.Annotations = map[string]string{metal3.StatusAnnotation: string(saved)}
			b.Status = metal3.BareMetalHostStatus{}
		}, state: bpa.HostMatched},
		{name: "no state yet, a new BareMetalHost (no status to restore)", bmh: func(b *metal3.BareMetalHost) {
			b.Status = metal3.BareMetalHostStatus{}
		}, state: bpa.HostMatched},
		{name: "unmanaged (BMC credentials gone)", bmh: func(b *metal3.BareMetalHost) {
			b.Status.Provisioning.State = metal3.StateUnmanaged
		}, keep: true},
		{name: "no provision history", bmh: func(*metal3.BareMetalHost) {}, noHistory: true, keep: true},
		{name: "no provision history, a BMC error", bmh: bmcError, noHistory: true, keep: true},
		{name: "provisioned again", bmh: func(b *metal3.BareMetalHost) { b.Status.OperationHistory.Provision.End = t2 },
			state: bpa.HostProvisioned},
		{name: "provisioned again, then a BMC error", bmh: func(b *metal3.BareMetalHost) {
			b.Status.OperationHistory.Provision.End = t2
			bmcError(b)
		}, state: bpa.HostProvisioned},
		{name: "deprovisioning", bmh: func(b *metal3.BareMetalHost) { b.Status.Provisioning.State = metal3.StateDeprovisioning },
			state: bpa.HostMatched},
		{name: "deprovisioning with a BMC error", bmh: func(b *metal3.BareMetalHost) {
			b.Status.Provisioning.State = metal3.StateDeprovisioning
			bmcError(b)
		}, state: bpa.HostError},
		{name: "available again", bmh: func(b *metal3.BareMetalHost) { b.Status.Provisioning.State = metal3.StateAvailable },
			state: bpa.HostMatched},
		{name: "provisioning", bmh: func(b *metal3.BareMetalHost) { b.Status.Provisioning.State = metal3.StateProvisioning },
			state: bpa.HostProvisioning},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := prov(map[string]string{"m1": "52:54:00:00:00:01"}, nil)
			p.Status.Hosts = []bpa.HostStatus{installedHost(t1)}
			b := bmh("bmh-m1", "52:54:00:00:00:01", metal3.StateProvisioned)
			b.CreationTimestamp = metav1.NewTime(t1.Add(-time.Hour))
			b.Status.OperationHistory.Provision.End = t1
			if c.noHistory {
				b.Status.OperationHistory.Provision.End = metav1.Time{}
				p.Status.Hosts[0].ProvisionedAt = &b.CreationTimestamp
			}
			b.Status.PoweredOn = true
			c.bmh(&b)

			h := HostStatuses(p, []metal3.BareMetalHost{b}, now)[0]
			if c.keep {
				want := p.Status.Hosts[0]
				if h.State != bpa.HostReady || h.Error != "" || len(h.Phases) != 4 || h.Address != want.Address ||
					!h.ProvisionedAt.Equal(want.ProvisionedAt) || !h.LastUpdated.Equal(want.LastUpdated) {
					t.Errorf("host = %+v, want it Ready with its four phases, address, provision time and last update", h)
				}
				// Once the BareMetalHost is well again, nothing runs again.
				p.Status.Hosts = []bpa.HostStatus{h}
				well := bmh("bmh-m1", "52:54:00:00:00:01", metal3.StateProvisioned)
				well.CreationTimestamp = b.CreationTimestamp
				well.Status.OperationHistory.Provision.End = t1
				if c.noHistory {
					well.Status.OperationHistory.Provision.End = metav1.Time{}
				}
				if h := HostStatuses(p, []metal3.BareMetalHost{well}, now)[0]; h.State != bpa.HostReady || len(h.Phases) != 4 {
					t.Errorf("the BareMetalHost well again: %+v, want it Ready with its phases", h)
				}
				return
			}
			if h.State != c.state || len(h.Phases) != 0 || h.Address != "" {
				t.Errorf("host = %+v, want %s with no phases: the disk was written or wiped", h, c.state)
			}
			if c.state == bpa.HostProvisioned && !h.ProvisionedAt.Equal(&t2) {
				t.Errorf("provisioned at %v, want %v", h.ProvisionedAt, t2)
			}
		})
	}
}

// TestExternallyProvisionedHost: a host whose OS was written before the
// baremetal-operator (externallyProvisioned) is installed like a
// provisioned one, keeps its install from pass to pass (before, its
// phases were wiped on every pass, for ever), and is installed anew only
// when its BareMetalHost is made anew or provisioned by the operator.
func TestExternallyProvisionedHost(t *testing.T) {
	t1 := metav1.NewTime(time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC))
	t2 := metav1.NewTime(t1.Add(30 * time.Minute))
	now := metav1.NewTime(t1.Add(time.Hour))
	done := metav1.NewTime(t1.Add(time.Minute))
	installing := func(at metav1.Time) []bpa.HostStatus {
		return []bpa.HostStatus{{Name: "m1", Role: RoleMaster, State: bpa.HostInstalling, ProvisionedAt: &at,
			Phases: []bpa.Phase{{Name: bpa.PhaseConnect, Started: t1, Finished: &done}, {Name: bpa.PhaseInstall, Started: t1, Finished: &done}}}}
	}
	for _, c := range []struct {
		name   string
		before []bpa.HostStatus
		bmh    func(b *metal3.BareMetalHost)
		state  bpa.HostState
		phases int
		at     *metav1.Time
	}{
		{name: "first seen: installed like a provisioned host", bmh: func(*metal3.BareMetalHost) {},
			state: bpa.HostProvisioned, at: &t1},
		{name: "the next pass keeps the install", before: installing(t1), bmh: func(*metal3.BareMetalHost) {},
			state: bpa.HostInstalling, phases: 2, at: &t1},
		{name: "a BMC error keeps it", before: installing(t1), bmh: func(b *metal3.BareMetalHost) {
			b.Status.OperationalStatus, b.Status.ErrorType = metal3.OperationalStatusError, metal3.PowerManagementError
		}, state: bpa.HostInstalling, phases: 2, at: &t1},
		{name: "a failed install is kept and retried", before: func() []bpa.HostStatus {
			hs := installing(t1)
			hs[0].State, hs[0].Error = bpa.HostError, "connect: host m1 has no address: give it a static address in the site's networkData"
			return hs
		}(), bmh: func(*metal3.BareMetalHost) {}, state: bpa.HostError, phases: 2, at: &t1},
		{name: "its BareMetalHost made anew", before: installing(t1), bmh: func(b *metal3.BareMetalHost) { b.CreationTimestamp = t2 },
			state: bpa.HostProvisioned, at: &t2},
		{name: "provisioned by the operator since", before: installing(t1), bmh: func(b *metal3.BareMetalHost) {
			b.Status.Provisioning.State = metal3.StateProvisioned
			b.Status.OperationHistory.Provision.End = t2
		}, state: bpa.HostProvisioned, at: &t2},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := prov(map[string]string{"m1": "52:54:00:00:00:01"}, nil)
			p.Status.Hosts = c.before
			b := bmh("bmh-m1", "52:54:00:00:00:01", metal3.StateExternallyProvisioned)
			b.Spec.ExternallyProvisioned = true
			b.CreationTimestamp = t1
			c.bmh(&b)
			h := HostStatuses(p, []metal3.BareMetalHost{b}, now)[0]
			if h.State != c.state || len(h.Phases) != c.phases || !h.ProvisionedAt.Equal(c.at) {
				t.Errorf("host = %+v, want %s with %d phases, provisioned at %v", h, c.state, c.phases, c.at)
			}
			if !hasOS(&h) {
				t.Errorf("host = %+v: the installer would skip it", h)
			}
			// The same objects give the same status: nothing to write.
			p.Status.Hosts = []bpa.HostStatus{h}
			if again := HostStatuses(p, []metal3.BareMetalHost{b}, metav1.NewTime(now.Add(time.Minute)))[0]; again.State != h.State ||
				len(again.Phases) != len(h.Phases) || !again.LastUpdated.Equal(h.LastUpdated) {
				t.Errorf("the next pass: %+v, want %+v", again, h)
			}
		})
	}
}
