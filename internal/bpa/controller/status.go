// Package controller is the binary provisioning agent's reconciler: it
// matches each master and worker of a Provisioning to the metal3.io
// BareMetalHost with the same boot MAC address (in the Provisioning's
// namespace) and writes, per host, the matched BareMetalHost, where it is
// (Pending, Matched, Provisioning, Provisioned, Error) and what is wrong;
// the installer (installer.go) takes provisioned hosts on, through
// Installing or Unreachable, or Unfit when their hardware lacks what their
// role requires (fit.go), to Ready.
package controller

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	metal3 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	bpa "github.com/bootstick/bootstick/internal/bpa/v1alpha1"
)

// Roles of a host.
const (
	RoleMaster = "master"
	RoleWorker = "worker"
)

// ConditionReady is True when every host is Provisioned.
const ConditionReady = "Ready"

// NormalizeMAC returns a MAC address in lower case with ':' separators
// (BareMetalHosts and site files may use either case and '-').
func NormalizeMAC(mac string) string {
	return strings.ToLower(strings.ReplaceAll(strings.TrimSpace(mac), "-", ":"))
}

// host is one entry of the spec's masters or workers.
type host struct {
	name, role, mac string
	// alsoWorker marks a master the spec names as a worker too; conflict
	// says why such a host cannot be one node (two MAC addresses).
	alsoWorker bool
	conflict   string
}

// hosts lists the spec's masters then workers, each list sorted by name.
// A host named as master and worker too (as the original BPA allowed) is
// one master, which runs workloads (Schedulable).
func hosts(spec bpa.ProvisioningSpec) []host {
	var out []host
	add := func(role string, names map[string]string) {
		keys := make([]string, 0, len(names))
		for k := range names {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			out = append(out, host{name: k, role: role, mac: names[k]})
		}
	}
	masters := map[string]string{}
	for _, m := range spec.Masters {
		for name, e := range m {
			masters[name] = e.MACaddress
		}
	}
	workers := map[string]string{}
	for _, w := range spec.Workers {
		for name, e := range w {
			workers[name] = e.MACaddress
		}
	}
	add(RoleMaster, masters)
	for name, mac := range workers {
		mmac, ok := masters[name]
		if !ok {
			continue
		}
		delete(workers, name)
		for i := range out {
			if out[i].name != name {
				continue
			}
			out[i].alsoWorker = true
			if NormalizeMAC(mmac) != NormalizeMAC(mac) {
				out[i].conflict = fmt.Sprintf("host %s is named as a master with mac-address %s and as a worker with %s: a host that is both is one machine, give it one mac-address",
					name, NormalizeMAC(mmac), NormalizeMAC(mac))
			}
		}
	}
	add(RoleWorker, workers)
	return out
}

// Schedulable names the masters that run workloads as well: those also
// named as workers, and every master of a cluster with no worker (one
// server at an edge site, or three masters and nothing else), which would
// otherwise run nothing but its own control plane. Each master's is
// decided when it joins: a worker added later does not taint the masters
// already in the cluster.
func Schedulable(spec bpa.ProvisioningSpec) map[string]bool {
	hs := hosts(spec)
	workers := 0 // that are not masters
	for _, h := range hs {
		if h.role == RoleWorker {
			workers++
		}
	}
	out := map[string]bool{}
	for _, h := range hs {
		if h.role == RoleMaster && (h.alsoWorker || workers == 0) {
			out[h.name] = true
		}
	}
	return out
}

// HostStatuses computes the status of every host of p from the
// BareMetalHosts of its namespace. prev is the status written before:
// LastUpdated is kept for a host whose state did not change and set to now
// for one whose did.
func HostStatuses(p *bpa.Provisioning, bmhs []metal3.BareMetalHost, now metav1.Time) []bpa.HostStatus {
	byMAC := map[string][]*metal3.BareMetalHost{}
	for i := range bmhs {
		b := &bmhs[i]
		if b.DeletionTimestamp != nil || b.Spec.BootMACAddress == "" {
			continue
		}
		mac := NormalizeMAC(b.Spec.BootMACAddress)
		byMAC[mac] = append(byMAC[mac], b)
	}
	prev := map[string]bpa.HostStatus{}
	for _, h := range p.Status.Hosts {
		prev[h.Name] = h
	}

	hs := hosts(p.Spec)
	usedBy := map[string][]string{}
	for _, h := range hs {
		if h.mac != "" {
			usedBy[NormalizeMAC(h.mac)] = append(usedBy[NormalizeMAC(h.mac)], h.name)
		}
	}

	out := make([]bpa.HostStatus, 0, len(hs))
	for _, h := range hs {
		mac := NormalizeMAC(h.mac)
		st := bpa.HostStatus{Name: h.name, Role: h.role, MACAddress: mac}
		switch matches := byMAC[mac]; {
		case h.conflict != "":
			st.State = bpa.HostError
			st.Error = h.conflict
		case mac == "":
			st.State = bpa.HostError
			st.Error = fmt.Sprintf("host %s has no mac-address", h.name)
		case len(usedBy[mac]) > 1:
			st.State = bpa.HostError
			st.Error = fmt.Sprintf("hosts %s have the same mac-address %s", strings.Join(usedBy[mac], ", "), mac)
		case len(matches) == 0:
			st.State = bpa.HostPending
			st.Error = fmt.Sprintf("no BareMetalHost in namespace %s has boot MAC address %s", p.Namespace, mac)
		case len(matches) > 1:
			names := make([]string, len(matches))
			for i, b := range matches {
				names[i] = b.Name
			}
			sort.Strings(names)
			st.State = bpa.HostError
			st.Error = fmt.Sprintf("BareMetalHosts %s all have boot MAC address %s: give each host its own", strings.Join(names, ", "), mac)
		default:
			b := matches[0]
			st.BareMetalHost = b.Name
			st.State, st.Error = hostState(b)
			if old, ok := prev[h.name]; ok && keepsInstall(&old, b) {
				// The install goes on where it was: nothing shows that
				// this host's disk was written again. The BareMetalHost
				// shows its own error, if any (its BMC's, most often).
				st.State, st.Error, st.ProvisionedAt = old.State, old.Error, old.ProvisionedAt
				st.Address, st.Phases, st.Failures, st.NextRetry = old.Address, old.Phases, old.Failures, old.NextRetry
				break
			}
			if osWritten(b) {
				// A host provisioned anew starts its install anew. The
				// operator's error on a host whose OS is written touches
				// neither the OS nor the node: the host is installed.
				st.State, st.Error = bpa.HostProvisioned, ""
				st.ProvisionedAt = provisionedAt(b)
			}
		}
		st.LastUpdated = &now
		old, hadOld := prev[h.name]
		if hadOld && old.State == st.State && old.LastUpdated != nil {
			st.LastUpdated = old.LastUpdated
		}
		out = append(out, st)
	}
	return out
}

// hostState maps a BareMetalHost's provisioning state and operational
// status to the host's state. BareMetalHost error messages come from the
// provisioner and never hold the BMC credentials.
func hostState(b *metal3.BareMetalHost) (bpa.HostState, string) {
	if b.Status.OperationalStatus == metal3.OperationalStatusError {
		msg := fmt.Sprintf("BareMetalHost %s: %s", b.Name, b.Status.ErrorType)
		if b.Status.ErrorMessage != "" {
			msg += ": " + b.Status.ErrorMessage
		}
		return bpa.HostError, msg
	}
	switch {
	case b.Status.Provisioning.State == metal3.StateProvisioning:
		return bpa.HostProvisioning, ""
	case osWritten(b):
		return bpa.HostProvisioned, ""
	default:
		return bpa.HostMatched, ""
	}
}

// osWritten reports whether b's OS is on its disk: provisioned, by
// Ironic or before BMO (externally).
func osWritten(b *metal3.BareMetalHost) bool {
	switch b.Status.Provisioning.State {
	case metal3.StateProvisioned, metal3.StateExternallyProvisioned:
		return true
	}
	return false
}

// keepsInstall reports whether old, the host's status before, holds an
// install that still stands on b: the BPA's record of it is dropped only
// on evidence that the host's disk was written or wiped since (issue 26:
// before, one error the operator reported on a provisioned host, a power
// status its BMC could not give, erased every phase, and the next pass ran
// them all again). The evidence is b's provision time moving, or b being
// seen in a state that writes, wipes or inspects the disk. An operator
// error (OperationalStatus error, power state unknown), a host detached
// or unmanaged (the operator cannot touch it) is no such evidence.
//
// A BareMetalHost with no state yet is judged by the status it carries in
// its status annotation, which the operator restores it from (it was
// moved, or restored from a backup). One without is new: the operator
// will inspect and provision the machine again.
func keepsInstall(old *bpa.HostStatus, b *metal3.BareMetalHost) bool {
	if old.ProvisionedAt == nil || !(provisioned(old.State) || old.State == bpa.HostError || old.State == bpa.HostUnfit) {
		return false // no install (or role matching) recorded
	}
	switch b.Status.Provisioning.State {
	case metal3.StateProvisioned, metal3.StateExternallyProvisioned:
		pa := provisionedAt(b)
		return pa != nil && pa.Equal(old.ProvisionedAt)
	case metal3.StateUnmanaged:
		return true
	case metal3.StateNone:
		saved, ok := savedStatus(b)
		return ok && saved.Status.Provisioning.State != metal3.StateNone && keepsInstall(old, saved)
	}
	return false
}

// savedStatus is b with the status its status annotation holds, if it
// holds one.
func savedStatus(b *metal3.BareMetalHost) (*metal3.BareMetalHost, bool) {
	a, ok := b.Annotations[metal3.StatusAnnotation]
	if !ok {
		return nil, false
	}
	saved := b.DeepCopy()
	saved.Status = metal3.BareMetalHostStatus{}
	if err := json.Unmarshal([]byte(a), &saved.Status); err != nil {
		return nil, false
	}
	return saved, true
}

// provisionedAt is when b's OS was written: the end of its provision
// operation. A host provisioned externally has none, nor has one whose
// operator lost its history: there it is when b was made, which holds as
// long as b does (before, such a host's install began anew on every pass,
// for ever). Nil when neither is known.
func provisionedAt(b *metal3.BareMetalHost) *metav1.Time {
	end := b.Status.OperationHistory.Provision.End
	if end.IsZero() && osWritten(b) {
		end = b.CreationTimestamp
	}
	if end.IsZero() {
		return nil
	}
	t := metav1.NewTime(end.Time.Truncate(time.Second))
	return &t
}

// readyCondition summarizes the hosts.
func readyCondition(hs []bpa.HostStatus, generation int64) metav1.Condition {
	c := metav1.Condition{Type: ConditionReady, ObservedGeneration: generation}
	count := map[bpa.HostState]int{}
	for _, h := range hs {
		if h.State == bpa.HostError && h.ProvisionedAt != nil {
			continue // provisioned; the install failed (ClusterReady says so)
		}
		count[h.State]++
	}
	switch {
	case len(hs) == 0:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, "NoHosts", "the Provisioning names no masters or workers"
	case count[bpa.HostError] > 0:
		c.Status, c.Reason = metav1.ConditionFalse, "HostError"
		c.Message = fmt.Sprintf("%d of %d hosts have an error", count[bpa.HostError], len(hs))
		if n, unfit := unfitHosts(hs); n > 0 {
			c.Message += fmt.Sprintf("; %d do not fit their requirements: %s", n, unfit)
		}
	case count[bpa.HostUnfit] > 0:
		n, unfit := unfitHosts(hs)
		c.Status, c.Reason = metav1.ConditionFalse, ReasonHostsUnfit
		c.Message = fmt.Sprintf("%d of %d hosts provisioned; %d do not fit their requirements: %s", provisionedCount(hs), len(hs), n, unfit)
	case provisionedCount(hs) == len(hs):
		c.Status, c.Reason = metav1.ConditionTrue, "AllProvisioned"
		c.Message = fmt.Sprintf("%d hosts provisioned", len(hs))
	default:
		c.Status, c.Reason = metav1.ConditionFalse, "Waiting"
		c.Message = fmt.Sprintf("%d of %d hosts provisioned, %d waiting for a BareMetalHost", provisionedCount(hs), len(hs), count[bpa.HostPending])
	}
	return c
}

func provisionedCount(hs []bpa.HostStatus) int {
	n := 0
	for _, h := range hs {
		if hasOS(&h) {
			n++
		}
	}
	return n
}

// Status computes p's whole status.
func Status(p *bpa.Provisioning, bmhs []metal3.BareMetalHost, now metav1.Time) bpa.ProvisioningStatus {
	st := bpa.ProvisioningStatus{ObservedGeneration: p.Generation, KubeconfigSecret: p.Status.KubeconfigSecret}
	st.Hosts = HostStatuses(p, bmhs, now)
	st.Conditions = append([]metav1.Condition(nil), p.Status.Conditions...)
	c := readyCondition(st.Hosts, p.Generation)
	c.LastTransitionTime = now
	meta.SetStatusCondition(&st.Conditions, c)
	return st
}
