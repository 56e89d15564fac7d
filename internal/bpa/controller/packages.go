package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/bootstick/bootstick/internal/bpa/install"
	bpa "github.com/bootstick/bootstick/internal/bpa/v1alpha1"
)

// PackagesFinalizer holds a ContainerPackages until its packages are
// removed from the cluster.
const PackagesFinalizer = "bpa.akraino.org/container-packages"

// Reasons of the packages' Events, on their ContainerPackages.
const (
	ReasonPackageReady    = "PackageReady"
	ReasonPackageRefused  = "PackageRefused"
	ReasonPackageFailed   = "PackageFailed"
	ReasonPackageRemoved  = "PackageRemoved"
	ConditionPackageReady = "Ready"
	// ReasonKUDPluginsMapped is on the Provisioning whose KUDPlugins made
	// a ContainerPackages.
	ReasonKUDPluginsMapped = "KUDPluginsMapped"
)

// PackagesPoll is how often the BPA looks again at packages on their way
// (installing, removing, waiting for another package or failed).
var PackagesPoll = 10 * time.Second

// PackagesReconciler installs each ContainerPackages' packages on its
// Provisioning's application cluster, through that cluster's API with its
// admin kubeconfig (the Secret <cluster>-kubeconfig), once the
// Provisioning's ClusterReady is True: in the order each needs
// (install.PluginAfter), each applied and then waited for until its
// objects are ready; a package taken out of the list is removed. The
// cluster's pod network is the Provisioning's (init installs it): named
// here, it is Ready and never removed.
type PackagesReconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Manifest renders a package's objects for a cluster, and After
	// orders the packages; install.PluginManifest and install.PluginAfter
	// when nil (tests give packages of their own).
	Manifest func(cfg *install.Config, cl install.Cluster, name string) (string, error)
	After    map[string][]string
}

func (r *PackagesReconciler) after() map[string][]string {
	if r.After != nil {
		return r.After
	}
	return install.PluginAfter
}

// SetupWithManager watches ContainerPackages and the Provisionings they
// name.
func (r *PackagesReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorder(EventRecorderName)
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("containerpackages").
		For(&bpa.ContainerPackages{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&bpa.Provisioning{}, handler.EnqueueRequestsFromMapFunc(r.packagesOf)).
		Complete(r)
}

// packagesOf are the ContainerPackages that name the Provisioning o.
func (r *PackagesReconciler) packagesOf(ctx context.Context, o client.Object) []reconcile.Request {
	var list bpa.ContainerPackagesList
	if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing container packages", "namespace", o.GetNamespace())
		return nil
	}
	var out []reconcile.Request
	for _, cp := range list.Items {
		if cp.Spec.Cluster == o.GetName() {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: cp.Namespace, Name: cp.Name}})
		}
	}
	return out
}

func (r *PackagesReconciler) now() time.Time { return clockOr(r.Now)() }

// Reconcile takes one ContainerPackages a step further and writes its
// status when it changed.
func (r *PackagesReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var cp bpa.ContainerPackages
	if err := r.Client.Get(ctx, req.NamespacedName, &cp); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("reading container packages %s: %w", req.NamespacedName, err)
	}
	if cp.DeletionTimestamp == nil && controllerutil.AddFinalizer(&cp, PackagesFinalizer) {
		if err := r.Client.Update(ctx, &cp); err != nil {
			return reconcile.Result{}, fmt.Errorf("adding the finalizer to container packages %s: %w", req.NamespacedName, err)
		}
	}
	before := cp.Status.DeepCopy()
	pass := &packagesPass{r: r, cp: &cp}
	wait, err := pass.run(ctx)
	if err != nil {
		return reconcile.Result{}, err
	}
	if cp.DeletionTimestamp != nil && len(cp.Status.Packages) == 0 || pass.dropFinalizer {
		controllerutil.RemoveFinalizer(&cp, PackagesFinalizer)
		if err := r.Client.Update(ctx, &cp); err != nil && !apierrors.IsNotFound(err) {
			return reconcile.Result{}, fmt.Errorf("removing the finalizer of container packages %s: %w", req.NamespacedName, err)
		}
		return reconcile.Result{}, nil
	}
	if !statusEqual(before, &cp.Status) {
		if err := r.Client.Status().Update(ctx, &cp); err != nil {
			return reconcile.Result{}, fmt.Errorf("writing the status of container packages %s: %w", req.NamespacedName, err)
		}
	}
	return reconcile.Result{RequeueAfter: wait}, nil
}

// packagesPass is one pass over a ContainerPackages.
type packagesPass struct {
	r  *PackagesReconciler
	cp *bpa.ContainerPackages
	// next is the status being made, by package name.
	next map[string]bpa.PackageStatus
	// dropFinalizer: a deleted ContainerPackages whose cluster is gone.
	dropFinalizer bool
}

// run makes the next status and returns when to look again.
func (x *packagesPass) run(ctx context.Context) (time.Duration, error) {
	cp := x.cp
	x.next = map[string]bpa.PackageStatus{}
	named := slices.Compact(slices.Sorted(slices.Values(cp.Spec.Packages)))
	if cp.DeletionTimestamp != nil {
		named = nil // each goes, as if taken out of the list
	}
	wait, err := x.install(ctx, named)
	if err != nil {
		return 0, err
	}
	// The status: the named packages in the order they install, then
	// those being removed.
	order := x.order(named)
	cp.Status.Packages = nil
	for _, n := range order {
		cp.Status.Packages = append(cp.Status.Packages, x.next[n])
	}
	for _, p := range slices.SortedFunc(func(yield func(bpa.PackageStatus) bool) {
		for n, p := range x.next {
			if !slices.Contains(order, n) && !yield(p) {
				return
			}
		}
	}, func(a, b bpa.PackageStatus) int { return strings.Compare(a.Name, b.Name) }) {
		cp.Status.Packages = append(cp.Status.Packages, p)
	}
	cp.Status.ObservedGeneration = cp.Generation
	ready := metav1.Condition{Type: ConditionPackageReady, Status: metav1.ConditionTrue, Reason: "AllReady", Message: "every package is ready",
		ObservedGeneration: cp.Generation}
	var notReady []string
	for _, p := range cp.Status.Packages {
		if p.State != bpa.PackageReady {
			notReady = append(notReady, p.Name+" "+strings.ToLower(string(p.State)))
		}
	}
	if len(notReady) > 0 {
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, "NotReady", strings.Join(notReady, ", ")
	}
	meta.SetStatusCondition(&cp.Status.Conditions, ready)
	return wait, nil
}
