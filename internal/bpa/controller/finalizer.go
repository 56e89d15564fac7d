package controller

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	bpa "github.com/bootstick/bootstick/internal/bpa/v1alpha1"
)

// Finalizer holds a Provisioning until the BPA has seen it go: no install
// pass runs on a Provisioning being deleted, and its kubeconfig Secret is
// released first (see finalize).
const Finalizer = "bpa.akraino.org/provisioning"

// ensureFinalizer adds the finalizer to a live p. It reports whether p
// was written (p then holds the answer).
func (r *Reconciler) ensureFinalizer(ctx context.Context, p *bpa.Provisioning) (bool, error) {
	if p.DeletionTimestamp != nil || !controllerutil.AddFinalizer(p, Finalizer) {
		return false, nil
	}
	if err := r.Client.Update(ctx, p); err != nil {
		return false, fmt.Errorf("adding the finalizer to provisioning %s/%s: %w", p.Namespace, p.Name, err)
	}
	return true, nil
}

// finalize is the BPA's part of deleting p. The application cluster is
// left as it is: its nodes keep running and nothing is undone on them
// (taking a cluster down is for its owner, with its kubeconfig). So the
// kubeconfig Secret stays, released from any ownerReference a BPA before
// this one set on it, so that the garbage collector does not follow p.
// The BPA makes no other object per cluster. Then the finalizer goes.
func (r *Reconciler) finalize(ctx context.Context, p *bpa.Provisioning) error {
	if !controllerutil.ContainsFinalizer(p, Finalizer) {
		return nil
	}
	var kept []string
	for _, name := range kubeconfigSecrets(p) {
		var s corev1.Secret
		if err := r.Client.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: name}, &s); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return fmt.Errorf("reading Secret %s/%s: %w", p.Namespace, name, err)
		}
		if release(&s, p) {
			if err := r.Client.Update(ctx, &s); err != nil {
				return fmt.Errorf("releasing Secret %s/%s from provisioning %s: %w", p.Namespace, name, p.Name, err)
			}
		}
		kept = append(kept, p.Namespace+"/"+name)
	}
	msg := fmt.Sprintf("provisioning deleted: the nodes of cluster %s are left as they are", clusterName(p))
	if len(kept) > 0 {
		msg += "; its admin kubeconfig stays in Secret " + strings.Join(kept, ", ")
	}
	controllerutil.RemoveFinalizer(p, Finalizer)
	if err := r.Client.Update(ctx, p); err != nil {
		return fmt.Errorf("removing the finalizer of provisioning %s/%s: %w", p.Namespace, p.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("provisioning deleted", "kubeconfigSecrets", kept)
	r.event(ref(p), false, ReasonDeleting, "Delete", msg)
	return nil
}
