package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/bootstick/bootstick/internal/bpa/addons"
	"github.com/bootstick/bootstick/internal/bpa/install"
	bpa "github.com/bootstick/bootstick/internal/bpa/v1alpha1"
)

// demoPackages are two packages a test stick carries, demo-net going
// after demo: demo is a Namespace, a ConfigMap and a DaemonSet of its
// image; demo-net a ConfigMap in demo's Namespace.
func demoPackages(cfg *install.Config, _ install.Cluster, name string) (string, error) {
	switch name {
	case "demo":
		return fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata: {name: demo}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: demo-cfg, namespace: demo}
data: {conf: "{}"}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: demo-ds, namespace: demo}
spec:
  selector: {matchLabels: {app: demo}}
  template:
    metadata: {labels: {app: demo}}
    spec:
      containers: [{name: demo, image: %s}]
`, cfg.Plugins["demo"].Image), nil
	case "demo-net":
		return "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: demo-net, namespace: demo}\ndata: {net: macvlan}\n", nil
	}
	return install.PluginManifest(cfg, install.Cluster{}, name)
}

// packagesSite is a namespace of a real API server that plays both the
// appliance (the Provisioning, its install ConfigMap, the kubeconfig
// Secret, the ContainerPackages) and the application cluster (the
// kubeconfig is the API server's own).
type packagesSite struct {
	t      *testing.T
	c      client.Client
	r      *PackagesReconciler
	events *eventLog
	key    types.NamespacedName
}

func newPackagesSite(t *testing.T) (context.Context, *packagesSite) {
	ctx, env, c := apiSitesEnv(t)
	ns := DefaultNamespace
	cfg := installConfig(nil)
	cfg.Plugins["demo"] = install.Plugin{Image: "registry.example/demo:v1.2.3"}
	cfg.Plugins["demo-net"] = install.Plugin{Image: "registry.example/demo-net:v0.9"}
	cfg.Images = append(cfg.Images, install.Image{Name: "registry.example/demo:v1.2.3", Digest: "sha256:" + strings.Repeat("4", 64)},
		install.Image{Name: "registry.example/demo-net:v0.9", Digest: "sha256:" + strings.Repeat("5", 64)})
	data, err := cfg.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := os.ReadFile(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	p := &bpa.Provisioning{ObjectMeta: metav1.ObjectMeta{Name: "edge", Namespace: ns}}
	p.Spec.Masters = []map[string]bpa.Master{{"master-0": {MACaddress: "52:54:00:00:00:10"}}}
	for _, o := range []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: install.ConfigMapName, Namespace: ns}, Data: map[string]string{install.ConfigKey: data}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: KubeconfigSecretName("edge"), Namespace: ns}, Data: map[string][]byte{"value": kubeconfig}},
		p,
	} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	s := &packagesSite{t: t, c: c, events: &eventLog{}, key: types.NamespacedName{Namespace: ns, Name: "edge-packages"}}
	s.r = &PackagesReconciler{Client: c, Recorder: s.events, Manifest: demoPackages, After: map[string][]string{"demo-net": {"demo"}}}
	return ctx, s
}

// clusterReady sets the Provisioning's ClusterReady condition.
func (s *packagesSite) clusterReady(ctx context.Context, status metav1.ConditionStatus, msg string) {
	s.t.Helper()
	var p bpa.Provisioning
	if err := s.c.Get(ctx, types.NamespacedName{Namespace: s.key.Namespace, Name: "edge"}, &p); err != nil {
		s.t.Fatal(err)
	}
	meta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{Type: ConditionClusterReady, Status: status, Reason: "Test", Message: msg})
	if err := s.c.Status().Update(ctx, &p); err != nil {
		s.t.Fatal(err)
	}
}

// reconcile runs one pass and returns the ContainerPackages (nil once it
// is gone) and when the BPA looks again.
func (s *packagesSite) reconcile(ctx context.Context) (*bpa.ContainerPackages, reconcile.Result) {
	s.t.Helper()
	res, err := s.r.Reconcile(ctx, reconcile.Request{NamespacedName: s.key})
	if err != nil {
		s.t.Fatalf("reconcile: %v", err)
	}
	var cp bpa.ContainerPackages
	if err := s.c.Get(ctx, s.key, &cp); apierrors.IsNotFound(err) {
		return nil, res
	} else if err != nil {
		s.t.Fatal(err)
	}
	return &cp, res
}

// states are the packages' states as "name state version: message".
func states(cp *bpa.ContainerPackages) []string {
	var out []string
	for _, p := range cp.Status.Packages {
		out = append(out, fmt.Sprintf("%s %s %s: %s", p.Name, p.State, p.Version, p.Message))
	}
	return out
}

func (s *packagesSite) want(cp *bpa.ContainerPackages, when string, want ...string) {
	s.t.Helper()
	got := states(cp)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		s.t.Errorf("%s: the packages are\n  %s\nwant\n  %s", when, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// exists reports whether the application cluster has the object.
func (s *packagesSite) exists(ctx context.Context, o client.Object, ns, name string) bool {
	s.t.Helper()
	err := s.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, o)
	if err != nil && !apierrors.IsNotFound(err) {
		s.t.Fatal(err)
	}
	return err == nil
}

// A ContainerPackages against a real API server that is both the
// appliance and the application cluster: it waits for the cluster;
// then the packages the stick carries are installed, demo-net only once
// demo (which it goes after) is ready, the pod network is the cluster's
// and one the stick lacks is refused with what it carries; a package
// taken out of the list is removed (its Namespace kept); deleting the
// object removes the rest and lets it go. The kubeconfig never reaches
// the status or an Event.
func TestPackagesCRInstallsInOrderRefusesAndRemoves(t *testing.T) {
	ctx, s := newPackagesSite(t)
	cp := &bpa.ContainerPackages{ObjectMeta: metav1.ObjectMeta{Name: s.key.Name, Namespace: s.key.Namespace},
		Spec: bpa.ContainerPackagesSpec{Cluster: "edge", Packages: []string{"demo-net", "nope", "demo", "flannel"}}}
	if err := s.c.Create(ctx, cp); err != nil {
		t.Fatal(err)
	}

	s.clusterReady(ctx, metav1.ConditionFalse, "master-0 is Installing")
	cp, res := s.reconcile(ctx)
	waiting := "cluster edge is not Ready: master-0 is Installing"
	s.want(cp, "the cluster not Ready", "demo Waiting : "+waiting, "demo-net Waiting : "+waiting, "flannel Waiting : "+waiting, "nope Waiting : "+waiting)
	if res.RequeueAfter == 0 || cp.Finalizers[0] != PackagesFinalizer {
		t.Errorf("waiting for the cluster: requeue %v, finalizers %v", res, cp.Finalizers)
	}

	s.clusterReady(ctx, metav1.ConditionTrue, "every host is a Ready node")
	cp, res = s.reconcile(ctx)
	s.want(cp, "the cluster Ready",
		"demo Installing v1.2.3: not ready yet: DaemonSet demo/demo-ds: its controller has not seen generation 1 yet",
		"demo-net Waiting v0.9: it goes after demo, which is not ready yet",
		"flannel Ready v0.27.4: the cluster's pod network: the BPA installed it when it made the cluster",
		"nope Refused : this stick does not carry it; it carries demo, demo-net, flannel")
	if res.RequeueAfter != PackagesPoll {
		t.Errorf("installing: requeue %v, want %v", res, PackagesPoll)
	}
	if c := meta.FindStatusCondition(cp.Status.Conditions, ConditionPackageReady); c == nil || c.Status != metav1.ConditionFalse ||
		c.Message != "demo installing, demo-net waiting, nope refused" {
		t.Errorf("Ready: %+v", c)
	}
	var cm corev1.ConfigMap
	if s.exists(ctx, &cm, "demo", "demo-net") {
		t.Error("demo-net was applied before demo was ready")
	}

	// demo's DaemonSet rolls out (its controller's part).
	var ds appsv1.DaemonSet
	if !s.exists(ctx, &ds, "demo", "demo-ds") || ds.Labels[addons.LabelPackage] != "demo" {
		t.Fatalf("demo's DaemonSet: %+v", ds.ObjectMeta)
	}
	ds.Status.ObservedGeneration, ds.Status.DesiredNumberScheduled, ds.Status.UpdatedNumberScheduled, ds.Status.NumberReady = ds.Generation, 1, 1, 1
	if err := s.c.Status().Update(ctx, &ds); err != nil {
		t.Fatal(err)
	}
	s.reconcile(ctx) // demo Ready; demo-net applied
	cp, _ = s.reconcile(ctx)
	s.want(cp, "demo rolled out",
		"demo Ready v1.2.3: ", "demo-net Ready v0.9: ",
		"flannel Ready v0.27.4: the cluster's pod network: the BPA installed it when it made the cluster",
		"nope Refused : this stick does not carry it; it carries demo, demo-net, flannel")
	if !s.exists(ctx, &cm, "demo", "demo-net") {
		t.Error("demo-net's ConfigMap was not applied")
	}
	// The cluster not Ready for a while (a host provisioned again): what
	// is installed stays as it was.
	s.clusterReady(ctx, metav1.ConditionFalse, "node-1 is Installing")
	cp, _ = s.reconcile(ctx)
	s.want(cp, "the cluster not Ready again",
		"demo Ready v1.2.3: ", "demo-net Ready v0.9: ",
		"flannel Ready v0.27.4: the cluster's pod network: the BPA installed it when it made the cluster",
		"nope Waiting : cluster edge is not Ready: node-1 is Installing")
	s.clusterReady(ctx, metav1.ConditionTrue, "every host is a Ready node")

	// demo taken out: removed, its Namespace kept; demo-net stays.
	cp.Spec.Packages = []string{"demo-net", "flannel"}
	if err := s.c.Update(ctx, cp); err != nil {
		t.Fatal(err)
	}
	cp, _ = s.reconcile(ctx)
	cp, _ = s.reconcile(ctx)
	s.want(cp, "demo taken out", "demo-net Ready v0.9: ", "flannel Ready v0.27.4: the cluster's pod network: the BPA installed it when it made the cluster")
	if s.exists(ctx, &ds, "demo", "demo-ds") || s.exists(ctx, &cm, "demo", "demo-cfg") {
		t.Error("demo's DaemonSet or ConfigMap is still there")
	}
	var nsObj corev1.Namespace
	if !s.exists(ctx, &nsObj, "", "demo") {
		t.Error("removing demo deleted its Namespace (and everything in it)")
	}
	if c := meta.FindStatusCondition(cp.Status.Conditions, ConditionPackageReady); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Ready after demo's removal: %+v", c)
	}

	// Deleted: demo-net goes, the pod network stays, the object goes.
	if err := s.c.Delete(ctx, cp); err != nil {
		t.Fatal(err)
	}
	if cp, _ = s.reconcile(ctx); cp != nil {
		cp, _ = s.reconcile(ctx)
	}
	if cp != nil {
		t.Errorf("the deleted ContainerPackages is still there: %v", states(cp))
	}
	if s.exists(ctx, &cm, "demo", "demo-net") {
		t.Error("deleting the ContainerPackages left demo-net's ConfigMap")
	}
	for _, want := range []string{"Normal PackageReady package demo v1.2.3 is ready on cluster edge", "Warning PackageRefused package nope: this stick does not carry it",
		"Normal PackageRemoved package demo was removed from cluster edge", "Normal PackageRemoved package demo-net was removed from cluster edge"} {
		if !s.events.has(want) {
			t.Errorf("no Event %q in %q", want, s.events.all())
		}
	}
	status, _ := json.Marshal(cp)
	for _, e := range append(s.events.all(), string(status)) {
		if strings.Contains(e, "client-key-data") || strings.Contains(e, "BEGIN") {
			t.Errorf("the kubeconfig reached %q", e)
		}
	}
}

// The Provisioning's KUDPlugins map onto a ContainerPackages of its own
// (all but the pod network, which init installs), kept to them: a plugin
// taken out of KUDPlugins is taken out of its list, and so removed.
func TestPackagesCRFromKUDPlugins(t *testing.T) {
	ctx, s := newPackagesSite(t)
	r := &Reconciler{Client: s.c, Installs: true, Recorder: s.events}
	key := types.NamespacedName{Namespace: s.key.Namespace, Name: "edge"}
	setKUD := func(plugins ...string) *bpa.ContainerPackages {
		t.Helper()
		var p bpa.Provisioning
		if err := s.c.Get(ctx, key, &p); err != nil {
			t.Fatal(err)
		}
		p.Spec.KUDPlugins = plugins
		if err := s.c.Update(ctx, &p); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: key}); err != nil {
			t.Fatal(err)
		}
		var cp bpa.ContainerPackages
		if err := s.c.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: "edge-kud"}, &cp); apierrors.IsNotFound(err) {
			return nil
		} else if err != nil {
			t.Fatal(err)
		}
		return &cp
	}
	if cp := setKUD(install.PluginFlannel); cp != nil {
		t.Errorf("KUDPlugins naming the pod network only made %+v", cp.Spec)
	}
	cp := setKUD(install.PluginFlannel, "demo-net", "demo")
	if cp == nil || cp.Spec.Cluster != "edge" || strings.Join(cp.Spec.Packages, " ") != "demo-net demo" || cp.Labels[LabelKUDPluginsOf] != "edge" {
		t.Fatalf("KUDPlugins flannel, demo-net, demo: %+v", cp)
	}
	if cp := setKUD("demo"); cp == nil || strings.Join(cp.Spec.Packages, " ") != "demo" {
		t.Errorf("KUDPlugins demo: %+v", cp)
	}
	if cp := setKUD(); cp == nil || len(cp.Spec.Packages) != 0 {
		t.Errorf("no KUDPlugins: %+v, want the ContainerPackages kept with no package (its packages removed)", cp)
	}
	if !s.events.has("Normal KUDPluginsMapped KUD plugins demo-net, demo: ContainerPackages edge-kud installs them once the cluster is Ready") {
		t.Errorf("events: %q", s.events.all())
	}
}
