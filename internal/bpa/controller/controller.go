package controller

import (
	"context"
	"fmt"
	"time"

	metal3 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	"golang.org/x/crypto/ssh"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/bootstick/bootstick/internal/bpa/install"
	bpa "github.com/bootstick/bootstick/internal/bpa/v1alpha1"
)

// Scheme holds the kinds the reconciler reads and writes.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, bpa.AddToScheme, metal3.AddToScheme} {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("building the scheme: %w", err)
		}
	}
	return s, nil
}

// Reconciler keeps each Provisioning's status in step with the
// BareMetalHosts of its namespace.
type Reconciler struct {
	Client client.Client
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Installs turns on the installer: once a Provisioning's first master
	// is provisioned, install its hosts over SSH and form the cluster.
	Installs bool
	// Recorder records Events on Provisionings; SetupWithManager takes
	// the manager's when nil.
	Recorder events.EventRecorder
	// Executors opens the executors that run the install's work on the
	// hosts; install.SSH (detached jobs over SSH) when nil. Tests give
	// install.Fake's.
	Executors func(cfg *install.Config, key ssh.Signer) install.Connector
}

// Reconcile recomputes one Provisioning's status and writes it when it
// changed, then installs its hosts. A Provisioning being deleted is only
// finalized.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var p bpa.Provisioning
	if err := r.Client.Get(ctx, req.NamespacedName, &p); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, nil // gone; nothing to report
		}
		return reconcile.Result{}, fmt.Errorf("reading provisioning %s: %w", req.NamespacedName, err)
	}
	if p.DeletionTimestamp != nil {
		return reconcile.Result{}, r.finalize(ctx, &p)
	}
	if _, err := r.ensureFinalizer(ctx, &p); err != nil {
		return reconcile.Result{}, err
	}
	var bmhs metal3.BareMetalHostList
	if err := r.Client.List(ctx, &bmhs, client.InNamespace(p.Namespace)); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing baremetalhosts in %s: %w", p.Namespace, err)
	}
	st := Status(&p, bmhs.Items, metav1.NewTime(r.clock()().Truncate(time.Second)))
	// Hosts applied with kubectl get user data with a host key before
	// they provision (userdata.go).
	var soon time.Duration
	if r.Installs {
		var err error
		if soon, err = r.giveUserData(ctx, &p, &st, bmhs.Items); err != nil {
			return reconcile.Result{}, err
		}
		if err := r.syncKUDPackages(ctx, &p); err != nil {
			return reconcile.Result{}, err
		}
	}
	if !equality.Semantic.DeepEqual(st, p.Status) {
		p.Status = st
		// A conflict (someone wrote in between) returns an error: the
		// request is queued again and recomputed from fresh objects.
		if err := r.Client.Status().Update(ctx, &p); err != nil {
			return reconcile.Result{}, fmt.Errorf("writing the status of provisioning %s: %w", req.NamespacedName, err)
		}
		ctrl.LoggerFrom(ctx).Info("status written", "hosts", len(st.Hosts), "ready", meta.FindStatusCondition(st.Conditions, ConditionReady).Reason)
	}
	if !r.Installs {
		return reconcile.Result{}, nil
	}
	again, err := r.Install(ctx, &p, bmhs.Items)
	if soon > 0 && (again == 0 || soon < again) {
		again = soon
	}
	return reconcile.Result{RequeueAfter: again}, err
}

// SetupWithManager watches Provisionings, and BareMetalHosts: a change to
// any BareMetalHost requeues every Provisioning of its namespace (there
// are few of them, and a MAC address can move between hosts). A
// Provisioning is reconciled when its spec or labels change (its
// generation moves on spec changes and on deletion), not on the BPA's own
// status writes: each pass asks for the next itself (RequeueAfter) when
// it waits on a host's backoff or on nodes becoming Ready.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorder(EventRecorderName)
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("provisioning").
		For(&bpa.Provisioning{}, builder.WithPredicates(provisioningChanged)).
		Watches(&metal3.BareMetalHost{}, handler.EnqueueRequestsFromMapFunc(r.provisioningsOf)).
		Complete(r)
}

// provisioningChanged passes a Provisioning's changes to its spec (and
// its deletion, which moves the generation too) or labels (the cluster's
// name), not those to its status or finalizers: the BPA's own writes.
var provisioningChanged = predicate.Or(predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{})

func (r *Reconciler) provisioningsOf(ctx context.Context, o client.Object) []reconcile.Request {
	var list bpa.ProvisioningList
	if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing provisionings", "namespace", o.GetNamespace())
		return nil
	}
	out := make([]reconcile.Request, len(list.Items))
	for i, p := range list.Items {
		out[i] = reconcile.Request{NamespacedName: types.NamespacedName{Namespace: p.Namespace, Name: p.Name}}
	}
	return out
}
