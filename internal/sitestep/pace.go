package sitestep

import (
	"context"
	"fmt"
	"maps"

	metal3 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/bootstick/bootstick/internal/hoststate"
	"github.com/bootstick/bootstick/internal/kube"
	"github.com/bootstick/bootstick/internal/logctx"
)

// HoldValue is the value of the baremetal-operator's paused annotation on
// a BareMetalHost the site step holds back: the operator leaves a paused
// host alone (no registration, no finalizer), and another value of the
// annotation is someone else's pause, which the site step never lifts.
const HoldValue = "bootstick.dev/provisioning-limit"

// DefaultLimit is how many hosts are at work at once when the site gives
// no bootstrap.provisioningLimit: the baremetal-operator's own default.
const DefaultLimit = 20

// Pacer lets the hosts start in waves of bootstrap.provisioningLimit.
//
// The baremetal-operator checks PROVISIONING_LIMIT against Ironic's busy
// nodes as each host moves to inspecting, provisioning or deprovisioning.
// Hosts registered together pass that check together (Ironic counts a node
// busy only once the operator has started its inspection), and the
// operator does not count hosts booted by virtual media at all. At first
// boot, with every host new, the limit then holds nothing back, and a
// small bootstrap machine serves every host at once. So the site step
// applies each host past the limit paused, and lifts the pause on the next
// one, in the site's order, each time a host is done: provisioned, or
// failed (its error held; the operator goes on retrying it). Every shape
// of host counts.
type Pacer struct {
	c     *kube.Client
	limit int
	order []string
	// held are the rendered BareMetalHosts still held back, each as it is
	// applied once released (no paused annotation).
	held map[string]*unstructured.Unstructured
}

// Held names the hosts the pacer holds back now.
func (p *Pacer) Held() []string {
	if p == nil {
		return nil
	}
	var out []string
	for _, n := range p.order {
		if p.held[n] != nil {
			out = append(out, n)
		}
	}
	return out
}

// startHeld decides, before the site is applied, which hosts start held:
// those with no BareMetalHost yet, or still held from an earlier run, past
// the slots the hosts already at work (released, not provisioned) leave.
// A host once released is never held again.
func startHeld(order []string, existing []hoststate.Host, limit int) map[string]bool {
	byName := map[string]hoststate.Host{}
	for _, h := range existing {
		byName[h.Name] = h
	}
	working := 0
	var waiting []string
	for _, n := range order {
		h, ok := byName[n]
		switch {
		case !ok || h.Paused == HoldValue:
			waiting = append(waiting, n)
		case h.State != string(metal3.StateProvisioned):
			working++
		}
	}
	held := map[string]bool{}
	for i, n := range waiting {
		if working+i >= limit {
			held[n] = true
		}
	}
	return held
}

// hold puts the paused annotation on the held hosts' BareMetalHosts among
// objs, and keeps a copy of each without it to apply on release.
func (p *Pacer) hold(objs []*unstructured.Unstructured, held map[string]bool) {
	p.held = map[string]*unstructured.Unstructured{}
	for _, u := range objs {
		if u.GetKind() != "BareMetalHost" || !held[u.GetName()] {
			continue
		}
		p.held[u.GetName()] = u.DeepCopy()
		a := maps.Clone(u.GetAnnotations())
		if a == nil {
			a = map[string]string{}
		}
		a[metal3.PausedAnnotation] = HoldValue
		u.SetAnnotations(a)
	}
}

// release lifts the pause on held hosts, in the site's order, while fewer
// than the limit are at work: released and not done. done says whether a
// host is done (provisioned, or failed for good). It returns the hosts it
// released.
func (p *Pacer) release(ctx context.Context, states []hoststate.Host, done func(hoststate.Host) bool) ([]string, error) {
	if p == nil || len(p.held) == 0 {
		return nil, nil
	}
	working := 0
	for _, h := range states {
		if p.held[h.Name] == nil && h.Paused != HoldValue && !done(h) {
			working++
		}
	}
	var out []string
	for _, n := range p.order {
		if working >= p.limit {
			break
		}
		u := p.held[n]
		if u == nil {
			continue
		}
		// The site step's own apply without the annotation: server-side
		// apply drops a field its manager no longer gives.
		if err := p.c.Apply(ctx, []*unstructured.Unstructured{u}); err != nil {
			return out, fmt.Errorf("releasing host %s: %w", n, err)
		}
		delete(p.held, n)
		working++
		out = append(out, n)
		logctx.From(ctx).Info("host released to the baremetal-operator", "name", n,
			"atWork", working, "provisioningLimit", p.limit, "stillHeld", len(p.held))
	}
	return out, nil
}
