package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	metal3 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/bootstick/bootstick/internal/bpa/install"
	bpa "github.com/bootstick/bootstick/internal/bpa/v1alpha1"
)

// Role matching by hardware (issue 26): a host whose entry in masters or
// workers requires cpu, memory, sriov or qat is installed only once its
// hardware has them. cpu and memory come from its BareMetalHost's
// inspection (status.hardwareDetails); sriov and qat, which inspection
// does not report, are read on the host once it is connected. The check
// runs between the connect phase and the install phase of each host not
// yet in the cluster, every pass: a host that does not fit is Unfit with
// what it lacks, and nothing after connect runs on it until it fits.

// Reasons of role matching's Events and conditions.
const (
	ReasonHostUnfit        = "HostUnfit"
	ReasonHostFits         = "HostFits"
	ReasonHostsUnfit       = "HostsUnfit"
	ReasonFirstMasterUnfit = "FirstMasterUnfit"
)

// checkRequirements names the check in failures and Events.
const checkRequirements = "requirements"

// UnfitPoll is how often the BPA looks again at a host that lacks SR-IOV
// or QAT: a change there (a card put in, SR-IOV enabled in its firmware)
// shows on no BareMetalHost, so nothing else would start a pass.
var UnfitPoll = 10 * time.Minute

// requirements are what a host's entries (masters and workers) require.
type requirements struct {
	cpu        int32
	memory     string
	sriov, qat bool
}

func (rq requirements) any() bool    { return rq.cpu > 0 || rq.memory != "" || rq.onHost() }
func (rq requirements) onHost() bool { return rq.sriov || rq.qat }

// requirementsOf is what host name requires: a host named as a master
// and as a worker is one machine, which must meet both entries.
func requirementsOf(spec bpa.ProvisioningSpec, name string) requirements {
	var rq requirements
	add := func(cpu int32, memory string) {
		rq.cpu = max(rq.cpu, cpu)
		if memory == "" {
			return
		}
		old, err1 := resource.ParseQuantity(rq.memory)
		q, err2 := resource.ParseQuantity(memory)
		if rq.memory == "" || err2 != nil || (err1 == nil && q.Cmp(old) > 0) {
			rq.memory = memory // the larger, or the one that is no quantity (to say so)
		}
	}
	for _, m := range spec.Masters {
		if e, ok := m[name]; ok {
			add(e.CPU, e.Memory)
		}
	}
	for _, w := range spec.Workers {
		if e, ok := w[name]; ok {
			add(e.CPU, e.Memory)
			rq.sriov = rq.sriov || e.SRIOV
			rq.qat = rq.qat || e.QAT
		}
	}
	return rq
}

// lacks says what b's inspected hardware and hw (read on the host, nil
// when rq needs nothing read there) lack of rq: "" when they fit, else
// e.g. "lacks cpu 16 (has 4), memory 64Gi (has 8Gi), qat".
func lacks(rq requirements, b *metal3.BareMetalHost, hw *install.Hardware) string {
	var missing, unknown, parts []string
	var details *metal3.HardwareDetails
	if b != nil {
		details = b.Status.HardwareDetails
	}
	if rq.cpu > 0 {
		switch {
		case details == nil:
			unknown = append(unknown, fmt.Sprintf("cpu %d", rq.cpu))
		case int64(details.CPU.Count) < int64(rq.cpu):
			missing = append(missing, fmt.Sprintf("cpu %d (has %d)", rq.cpu, details.CPU.Count))
		}
	}
	if rq.memory != "" {
		want, err := resource.ParseQuantity(rq.memory)
		switch {
		case err != nil:
			parts = append(parts, fmt.Sprintf("requires memory %q, which is not a quantity such as 64Gi", rq.memory))
		case details == nil:
			unknown = append(unknown, "memory "+rq.memory)
		default:
			has := resource.NewQuantity(int64(details.RAMMebibytes)<<20, resource.BinarySI)
			if has.Cmp(want) < 0 {
				missing = append(missing, fmt.Sprintf("memory %s (has %s)", rq.memory, has))
			}
		}
	}
	if hw != nil && rq.sriov && len(hw.SRIOV()) == 0 {
		missing = append(missing, "sriov")
	}
	if hw != nil && rq.qat && len(hw.QAT()) == 0 {
		missing = append(missing, "qat")
	}
	if len(missing) > 0 {
		parts = append([]string{"lacks " + strings.Join(missing, ", ")}, parts...)
	}
	if len(unknown) > 0 {
		parts = append(parts, fmt.Sprintf("cannot check %s: %s", strings.Join(unknown, ", "), noHardware(b)))
	}
	return strings.Join(parts, "; ")
}

// noHardware says why b shows no inspected hardware, and what to do, as
// the baremetal-operator works: it inspects a host when it registers it,
// unless inspection is disabled (the annotation inspect.metal3.io:
// disabled, or spec.inspectionMode: disabled) or the host is externally
// provisioned; a host whose inspection is disabled takes its hardware
// from the annotation inspect.metal3.io/hardwaredetails instead.
func noHardware(b *metal3.BareMetalHost) string {
	if b == nil {
		return "no BareMetalHost"
	}
	const give = `annotate it inspect.metal3.io/hardwaredetails='{"cpu":{"count":N},"ramMebibytes":M}' with what it has, which the baremetal-operator copies into its status`
	switch {
	case b.InspectionDisabled():
		return fmt.Sprintf("BareMetalHost %s has no inspected hardware, as its inspection is disabled: %s, "+
			"or enable inspection (remove the annotation inspect.metal3.io: disabled and spec.inspectionMode: disabled) and provision it again", b.Name, give)
	case b.Spec.ExternallyProvisioned:
		return fmt.Sprintf("BareMetalHost %s has no inspected hardware, as it is externally provisioned (never inspected): "+
			"annotate it inspect.metal3.io=disabled and %s", b.Name, strings.TrimPrefix(give, "annotate it "))
	default:
		return fmt.Sprintf("BareMetalHost %s has no inspected hardware (status.hardwareDetails) yet: provision it again, "+
			"which inspects it, or disable its inspection (inspect.metal3.io: disabled) and %s", b.Name, give)
	}
}

// checkFit checks connected h against its requirements and reports
// whether it fits. A host that does not is Unfit with what it lacks; a
// host found fit again goes on.
func (x *run) checkFit(ctx context.Context, h *bpa.HostStatus) bool {
	rq := requirementsOf(x.p.Spec, h.Name)
	var hw *install.Hardware
	if rq.onHost() {
		c, err := x.client(ctx, h)
		var got install.Hardware
		if err == nil {
			got, err = install.ReadHardware(ctx, c)
		}
		if err != nil {
			x.fail(ctx, h, checkRequirements, err)
			return false
		}
		hw = &got
	}
	if msg := lacks(rq, x.bmhs[h.BareMetalHost], hw); msg != "" {
		x.unfit(ctx, h, msg, rq.onHost())
		return false
	}
	x.fits(ctx, h)
	return true
}

// unfit marks h Unfit with msg (what it lacks), recorded with a Warning
// Event when msg or the state changed: an Unfit host keeps its record
// from pass to pass (see keepsInstall), so the Event says each change
// once. onHost asks for another look after UnfitPoll.
func (x *run) unfit(ctx context.Context, h *bpa.HostStatus, msg string, onHost bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if onHost {
		x.wantAgain(UnfitPoll)
	}
	if h.State == bpa.HostUnfit && h.Error == msg {
		return
	}
	if h.State != bpa.HostUnfit {
		t := metav1.NewTime(x.now().Truncate(time.Second))
		h.State, h.LastUpdated = bpa.HostUnfit, &t
	}
	h.Error, h.Failures, h.NextRetry = msg, 0, nil
	if err := x.save(ctx); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "recording a host that does not fit", "host", h.Name)
	}
	ctrl.LoggerFrom(ctx).Info("host does not fit its requirements", "host", h.Name, "role", h.Role, "lacks", msg)
	x.r.event(ref(x.p), true, ReasonHostUnfit, checkRequirements, fmt.Sprintf("host %s does not fit its %s requirements: %s; the BPA installs nothing on it until it does", h.Name, h.Role, msg))
}

// fits takes an Unfit h back to Provisioned, its install to go on.
func (x *run) fits(ctx context.Context, h *bpa.HostStatus) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if h.State != bpa.HostUnfit {
		return
	}
	t := metav1.NewTime(x.now().Truncate(time.Second))
	h.State, h.Error, h.LastUpdated = bpa.HostProvisioned, "", &t
	ctrl.LoggerFrom(ctx).Info("host fits its requirements", "host", h.Name)
	x.r.event(ref(x.p), false, ReasonHostFits, checkRequirements, fmt.Sprintf("host %s now fits its %s requirements: installing it", h.Name, h.Role))
}

// unfitHosts lists the Unfit hosts with what each lacks, e.g.
// "w1 (lacks qat), w2 (lacks cpu 16 (has 4))", and how many there are.
func unfitHosts(hs []bpa.HostStatus) (int, string) {
	var out []string
	for _, h := range hs {
		if h.State == bpa.HostUnfit {
			out = append(out, fmt.Sprintf("%s (%s)", h.Name, h.Error))
		}
	}
	return len(out), strings.Join(out, ", ")
}
