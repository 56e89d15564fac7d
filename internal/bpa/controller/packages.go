package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/bootstick/bootstick/internal/bpa/addons"
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

// statusEqual compares two statuses but for their times.
func statusEqual(a, b *bpa.ContainerPackagesStatus) bool {
	strip := func(s *bpa.ContainerPackagesStatus) *bpa.ContainerPackagesStatus {
		c := s.DeepCopy()
		for i := range c.Packages {
			c.Packages[i].LastTransitionTime = nil
		}
		for i := range c.Conditions {
			c.Conditions[i].LastTransitionTime = metav1.Time{}
		}
		return c
	}
	return equality.Semantic.DeepEqual(strip(a), strip(b))
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

// set records a package's state, and an Event when it changed to one
// worth telling.
func (x *packagesPass) set(name string, state bpa.PackageState, version, msg string) {
	prev := x.previous(name)
	st := bpa.PackageStatus{Name: name, State: state, Version: version, Message: redact(msg), LastTransitionTime: prev.LastTransitionTime,
		Applied: prev.Applied || x.next[name].Applied}
	if prev.State != state || st.LastTransitionTime == nil {
		t := metav1.NewTime(x.r.now())
		st.LastTransitionTime = &t
	}
	x.next[name] = st
	if prev.State == state && prev.Message == st.Message {
		return
	}
	switch state {
	case bpa.PackageReady:
		x.event(false, ReasonPackageReady, "Install", fmt.Sprintf("package %s %s is ready on cluster %s", name, version, x.cp.Spec.Cluster))
	case bpa.PackageRefused:
		x.event(true, ReasonPackageRefused, "Install", fmt.Sprintf("package %s: %s", name, msg))
	case bpa.PackageFailed:
		x.event(true, ReasonPackageFailed, "Install", fmt.Sprintf("package %s: %s", name, msg))
	}
}

func (x *packagesPass) previous(name string) bpa.PackageStatus {
	for _, p := range x.cp.Status.Packages {
		if p.Name == name {
			return p
		}
	}
	return bpa.PackageStatus{}
}

func (x *packagesPass) event(warning bool, reason, action, msg string) {
	recordEvent(x.r.Recorder, &corev1.ObjectReference{APIVersion: bpa.GroupVersion.String(), Kind: "ContainerPackages",
		Namespace: x.cp.Namespace, Name: x.cp.Name, UID: x.cp.UID}, warning, reason, action, msg)
}

// waitAll marks every named package as waiting for msg, but those
// already applied or Ready, which stay as the last pass saw them (a cluster that
// is not Ready for a while, a host of it provisioned again, does not
// undo them).
func (x *packagesPass) waitAll(named []string, msg string) {
	for _, n := range named {
		if prev := x.previous(n); prev.Applied || prev.State == bpa.PackageReady {
			x.next[n] = prev
			continue
		}
		x.set(n, bpa.PackageWaiting, x.previous(n).Version, msg)
	}
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

// order is named in install order: each after the packages it goes
// after (a cycle, which the BPA's own table cannot hold, by name).
func (x *packagesPass) order(named []string) []string {
	out, err := addons.Order(named, x.r.after())
	if err != nil {
		return named
	}
	return out
}

// install brings the cluster to the named packages, and says when to
// look again (0: all is done).
func (x *packagesPass) install(ctx context.Context, named []string) (time.Duration, error) {
	cp := x.cp
	var p bpa.Provisioning
	err := x.r.Client.Get(ctx, types.NamespacedName{Namespace: cp.Namespace, Name: cp.Spec.Cluster}, &p)
	if apierrors.IsNotFound(err) {
		if cp.DeletionTimestamp != nil {
			x.dropFinalizer = true // no cluster to remove them from
			return 0, nil
		}
		msg := fmt.Sprintf("no Provisioning %s in namespace %s", cp.Spec.Cluster, cp.Namespace)
		x.waitAll(named, msg)
		x.holdRemovals(named, msg)
		return time.Minute, nil // a Provisioning made later is watched too
	}
	if err != nil {
		return 0, fmt.Errorf("reading provisioning %s/%s: %w", cp.Namespace, cp.Spec.Cluster, err)
	}
	if c := meta.FindStatusCondition(p.Status.Conditions, ConditionClusterReady); c == nil || c.Status != metav1.ConditionTrue {
		why := "its cluster is not made yet"
		if c != nil {
			why = c.Message
		}
		msg := fmt.Sprintf("cluster %s is not Ready: %s", cp.Spec.Cluster, why)
		x.waitAll(named, msg)
		x.holdRemovals(named, msg)
		return time.Minute, nil
	}
	var cm corev1.ConfigMap
	err = x.r.Client.Get(ctx, types.NamespacedName{Namespace: cp.Namespace, Name: install.ConfigMapName}, &cm)
	if apierrors.IsNotFound(err) {
		msg := fmt.Sprintf("no ConfigMap %s/%s, which says what the stick carries: firstboot's site step writes it", cp.Namespace, install.ConfigMapName)
		x.waitAll(named, msg)
		x.holdRemovals(named, msg)
		return time.Minute, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading ConfigMap %s/%s: %w", cp.Namespace, install.ConfigMapName, err)
	}
	cfg, err := install.ParseConfig(cm.Data[install.ConfigKey])
	if err != nil {
		x.waitAll(named, err.Error())
		x.holdRemovals(named, err.Error())
		return time.Minute, nil
	}
	secret := KubeconfigSecretName(clusterName(&p))
	var s corev1.Secret
	err = x.r.Client.Get(ctx, types.NamespacedName{Namespace: cp.Namespace, Name: secret}, &s)
	if apierrors.IsNotFound(err) && cp.DeletionTimestamp != nil {
		x.dropFinalizer = true // the cluster was given up (see findCluster)
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading Secret %s/%s: %w", cp.Namespace, secret, err)
	}
	rc, err := clientcmd.RESTConfigFromKubeConfig(s.Data["value"])
	if err != nil {
		return 0, fmt.Errorf("Secret %s/%s does not hold a kubeconfig", cp.Namespace, secret)
	}
	rc.Timeout = 30 * time.Second
	app, err := addons.New(rc)
	if err != nil {
		return 0, fmt.Errorf("cluster %s: %w", cp.Spec.Cluster, err)
	}
	cl := baseCluster(&p, cfg)
	wait := x.remove(ctx, app, cfg, cl, named)
	carried := cfg.PluginNames()
	var known []string
	for _, n := range named {
		switch _, ok := cfg.Plugins[n]; {
		case !ok:
			x.set(n, bpa.PackageRefused, "", fmt.Sprintf("this stick does not carry it; it carries %s", strings.Join(carried, ", ")))
		case n == install.PluginFlannel:
			x.set(n, bpa.PackageReady, addons.Version(cfg.Plugins[n].Image), "the cluster's pod network: the BPA installed it when it made the cluster")
		default:
			known = append(known, n)
		}
	}
	order, err := addons.Order(known, x.r.after())
	if err != nil {
		return 0, err // the BPA's own table is wrong
	}
	for _, n := range order {
		version := addons.Version(cfg.Plugins[n].Image)
		if blocked := x.blockedBy(n, order); blocked != "" {
			x.set(n, bpa.PackageWaiting, version, "it goes after "+blocked+", which is not ready yet")
			wait = PackagesPoll
			continue
		}
		missing, err := x.installPackage(ctx, app, cfg, cl, n)
		switch {
		case err != nil:
			x.set(n, bpa.PackageFailed, version, err.Error())
			wait = PackagesPoll
		case len(missing) > 0:
			x.set(n, bpa.PackageInstalling, version, "not ready yet: "+strings.Join(missing, "; "))
			wait = PackagesPoll
		default:
			x.set(n, bpa.PackageReady, version, "")
		}
	}
	return wait, nil
}

// blockedBy names the package n goes after that is in order and not
// Ready in this pass; "" for none.
func (x *packagesPass) blockedBy(n string, order []string) string {
	for _, a := range x.r.after()[n] {
		if slices.Contains(order, a) && x.next[a].State != bpa.PackageReady {
			return a
		}
	}
	return ""
}

// holdRemovals keeps each applied package no longer named as one to
// remove, saying why it cannot be yet.
func (x *packagesPass) holdRemovals(named []string, why string) {
	for _, p := range x.cp.Status.Packages {
		if p.Applied && !slices.Contains(named, p.Name) {
			msg := "to be removed, which cannot be yet: " + why
			if x.cp.DeletionTimestamp != nil {
				msg += fmt.Sprintf(". To leave it on the cluster and let this object go: kubectl -n %s patch containerpackages %s --type json -p '[{\"op\":\"remove\",\"path\":\"/metadata/finalizers\"}]'",
					x.cp.Namespace, x.cp.Name)
			}
			x.set(p.Name, bpa.PackageRemoving, p.Version, msg)
		}
	}
}

// installPackage applies package n (marking it applied first: a failed
// apply may have made some of its objects) and says what of it is not
// ready.
func (x *packagesPass) installPackage(ctx context.Context, app *addons.Cluster, cfg *install.Config, cl install.Cluster, n string) ([]string, error) {
	objs, err := x.objects(cfg, cl, n)
	if err != nil {
		return nil, err
	}
	x.next[n] = bpa.PackageStatus{Name: n, Applied: true}
	if err := app.Apply(ctx, objs); err != nil {
		return nil, err
	}
	return app.NotReady(ctx, objs)
}

// objects are package n's objects for the cluster.
func (x *packagesPass) objects(cfg *install.Config, cl install.Cluster, n string) ([]*unstructured.Unstructured, error) {
	manifest := x.r.Manifest
	if manifest == nil {
		manifest = install.PluginManifest
	}
	m, err := manifest(cfg, cl, n)
	if err != nil {
		return nil, err
	}
	return addons.Objects(n, m)
}

// remove removes, the last installed first, each package the status shows
// that is no longer named (never the pod network, nor one that was
// refused), and says when to look again.
func (x *packagesPass) remove(ctx context.Context, app *addons.Cluster, cfg *install.Config, cl install.Cluster, named []string) time.Duration {
	var wait time.Duration
	for _, p := range slices.Backward(x.cp.Status.Packages) {
		if slices.Contains(named, p.Name) || !p.Applied {
			continue
		}
		objs, err := x.objects(cfg, cl, p.Name)
		var left []string
		if err == nil {
			left, err = app.Remove(ctx, objs)
		}
		switch {
		case err != nil:
			x.set(p.Name, bpa.PackageRemoving, p.Version, "removing it failed: "+err.Error())
			wait = PackagesPoll
		case len(left) > 0:
			x.set(p.Name, bpa.PackageRemoving, p.Version, "deleting "+strings.Join(left, ", "))
			wait = PackagesPoll
		default:
			x.event(false, ReasonPackageRemoved, "Remove", fmt.Sprintf("package %s was removed from cluster %s (its CustomResourceDefinitions and Namespaces are kept)", p.Name, x.cp.Spec.Cluster))
		}
	}
	return wait
}

// baseCluster is what a plugin's manifest needs to know of p's cluster.
func baseCluster(p *bpa.Provisioning, cfg *install.Config) install.Cluster {
	podSubnet := p.Spec.PodSubnet
	if podSubnet == "" {
		podSubnet = install.DefaultPodSubnet
	}
	return install.Cluster{Name: clusterName(p), PodSubnet: podSubnet, ServiceSubnet: cfg.ServiceSubnet, VIP: p.Spec.ControlPlaneVIP}
}

// KUDPackagesName is the ContainerPackages that a Provisioning's
// KUDPlugins map onto.
func KUDPackagesName(p *bpa.Provisioning) string { return p.Name + "-kud" }

// syncKUDPackages keeps the ContainerPackages KUDPackagesName(p) to p's
// KUDPlugins but the pod network (init installs it): made when they name
// another plugin, its list set to theirs (so a plugin taken out of
// KUDPlugins is removed from the cluster). It is the Provisioning's: one
// it did not make is not touched.
func (r *Reconciler) syncKUDPackages(ctx context.Context, p *bpa.Provisioning) error {
	var want []string
	for _, n := range p.Spec.KUDPlugins {
		if n != install.PluginFlannel && !slices.Contains(want, n) {
			want = append(want, n)
		}
	}
	name := types.NamespacedName{Namespace: p.Namespace, Name: KUDPackagesName(p)}
	var cp bpa.ContainerPackages
	err := r.Client.Get(ctx, name, &cp)
	switch {
	case apierrors.IsNotFound(err):
		if len(want) == 0 {
			return nil
		}
		cp = bpa.ContainerPackages{ObjectMeta: metav1.ObjectMeta{Namespace: name.Namespace, Name: name.Name, Labels: map[string]string{LabelKUDPluginsOf: p.Name}},
			Spec: bpa.ContainerPackagesSpec{Cluster: p.Name, Packages: want}}
		if err := r.Client.Create(ctx, &cp); err != nil {
			return fmt.Errorf("making container packages %s for the KUD plugins of provisioning %s: %w", name, p.Name, err)
		}
		r.event(ref(p), false, ReasonKUDPluginsMapped, "Install", fmt.Sprintf("KUD plugins %s: ContainerPackages %s installs them once the cluster is Ready", strings.Join(want, ", "), name.Name))
		return nil
	case err != nil:
		return fmt.Errorf("reading container packages %s: %w", name, err)
	case cp.Labels[LabelKUDPluginsOf] != p.Name || cp.Spec.Cluster != p.Name || slices.Equal(cp.Spec.Packages, want):
		return nil
	}
	cp.Spec.Packages = want
	if err := r.Client.Update(ctx, &cp); err != nil {
		return fmt.Errorf("updating container packages %s to the KUD plugins of provisioning %s: %w", name, p.Name, err)
	}
	return nil
}

// LabelKUDPluginsOf marks the ContainerPackages a Provisioning's
// KUDPlugins made, with the Provisioning's name.
const LabelKUDPluginsOf = "bpa.akraino.org/kud-plugins-of"
