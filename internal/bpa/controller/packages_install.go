package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/bootstick/bootstick/internal/bpa/addons"
	"github.com/bootstick/bootstick/internal/bpa/install"
	bpa "github.com/bootstick/bootstick/internal/bpa/v1alpha1"
)

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
