package controller

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	bpa "github.com/bootstick/bootstick/internal/bpa/v1alpha1"
)

// What a pass writes of the Provisioning's status besides its hosts':
// the ClusterReady condition, and why the BPA refuses to install.

// ConditionClusterReady is True when every host is a Ready node of the
// application cluster.
const ConditionClusterReady = "ClusterReady"

// save writes the status now, so that each phase shows as it happens.
func (x *run) save(ctx context.Context) error {
	x.setClusterCondition()
	// Ready too: role matching moves hosts to and from Unfit.
	ready := readyCondition(x.p.Status.Hosts, x.p.Generation)
	ready.LastTransitionTime = metav1.NewTime(x.now().Truncate(time.Second))
	meta.SetStatusCondition(&x.p.Status.Conditions, ready)
	// Update a copy: decoding the answer into x.p would move the hosts
	// that the pass holds pointers to.
	cp := x.p.DeepCopy()
	if err := x.r.Client.Status().Update(ctx, cp); err != nil {
		return fmt.Errorf("writing the status of provisioning %s/%s: %w", x.p.Namespace, x.p.Name, err)
	}
	x.p.ResourceVersion = cp.ResourceVersion
	return nil
}

func (x *run) setClusterCondition() {
	ready, unreachable, failed := 0, 0, 0
	for _, h := range x.p.Status.Hosts {
		switch h.State {
		case bpa.HostReady:
			ready++
		case bpa.HostUnreachable:
			unreachable++
		case bpa.HostError:
			failed++
		}
	}
	n := len(x.p.Status.Hosts)
	nUnfit, unfit := unfitHosts(x.p.Status.Hosts)
	first := x.firstMaster()
	switch {
	case n > 0 && ready == n:
		x.setCondition(ConditionClusterReady, metav1.ConditionTrue, "AllNodesReady", fmt.Sprintf("%d nodes Ready; kubeconfig in Secret %s", n, x.p.Status.KubeconfigSecret))
	case first != nil && first.State == bpa.HostUnfit && x.contact() == nil:
		x.setCondition(ConditionClusterReady, metav1.ConditionFalse, ReasonFirstMasterUnfit, fmt.Sprintf(
			"the cluster is not made: master %s, the first by name, on which kubeadm init makes it, does not fit its requirements (%s), "+
				"and no host joins before it does. Give it the hardware, or change its requirements in the site", first.Name, first.Error))
	case failed > 0 || unreachable > 0:
		msg := fmt.Sprintf("%d of %d nodes Ready, %d unreachable, %d failed", ready, n, unreachable, failed)
		if nUnfit > 0 {
			msg += fmt.Sprintf(", %d not fitting their requirements: %s", nUnfit, unfit)
		}
		x.setCondition(ConditionClusterReady, metav1.ConditionFalse, "HostsFailing", msg)
	case nUnfit > 0:
		x.setCondition(ConditionClusterReady, metav1.ConditionFalse, ReasonHostsUnfit,
			fmt.Sprintf("%d of %d nodes Ready; %d not fitting their requirements, on which the BPA installs nothing: %s", ready, n, nUnfit, unfit))
	default:
		x.setCondition(ConditionClusterReady, metav1.ConditionFalse, "Installing", fmt.Sprintf("%d of %d nodes Ready", ready, n))
	}
}

// setCondition sets condition typ of the status.
func (x *run) setCondition(typ string, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&x.p.Status.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg,
		ObservedGeneration: x.p.Generation, LastTransitionTime: metav1.NewTime(x.now().Truncate(time.Second))})
}

// refuse marks the cluster as not installable, for a reason the operator
// must fix.
func (x *run) refuse(ctx context.Context, reason, msg string) error {
	x.setCondition(ConditionClusterReady, metav1.ConditionFalse, reason, msg)
	ctrl.LoggerFrom(ctx).Info("not installing the cluster", "reason", reason, "message", msg)
	x.r.event(ref(x.p), true, reason, "Refuse", "not installing the cluster: "+msg)
	cp := x.p.DeepCopy()
	return x.r.Client.Status().Update(ctx, cp)
}
