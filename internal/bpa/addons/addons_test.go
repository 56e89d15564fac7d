package addons

import (
	"context"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bootstick/bootstick/internal/kubetest"
)

func TestOrder(t *testing.T) {
	after := map[string][]string{"multus": {"flannel"}, "nad-static": {"multus", "whereabouts"}, "whereabouts": {"flannel"}}
	for _, c := range []struct {
		names []string
		want  string
	}{
		{nil, ""},
		{[]string{"nfd"}, "nfd"},
		// Each after what it goes after, when named; else by name.
		{[]string{"multus", "flannel", "nfd", "whereabouts"}, "flannel multus nfd whereabouts"},
		{[]string{"nad-static", "whereabouts", "multus"}, "multus whereabouts nad-static"},
		// What it goes after but the list lacks does not hold it.
		{[]string{"multus", "nfd"}, "multus nfd"},
		{[]string{"nfd", "nfd"}, "nfd"},
	} {
		got, err := Order(c.names, after)
		if err != nil || strings.Join(got, " ") != c.want {
			t.Errorf("Order(%v) = %v, %v; want %s", c.names, got, err, c.want)
		}
	}
	if _, err := Order([]string{"a", "b", "c"}, map[string][]string{"a": {"b"}, "b": {"a"}}); err == nil || !strings.Contains(err.Error(), "packages a, b go after one another in a circle") {
		t.Errorf("a cycle: %v", err)
	}
}

func TestObjects(t *testing.T) {
	objs, err := Objects("demo", "# a comment\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: demo}\n---\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: demo, labels: {app: x}}\n")
	if err != nil || len(objs) != 2 {
		t.Fatalf("Objects: %d, %v", len(objs), err)
	}
	if l := objs[1].GetLabels(); l[LabelPackage] != "demo" || l["app"] != "x" {
		t.Errorf("labels %v", l)
	}
	for _, bad := range []string{"kind: ConfigMap\nmetadata: {namespace: x}\n", "apiVersion: v1\nkind: [\n"} {
		if _, err := Objects("demo", bad); err == nil || !strings.HasPrefix(err.Error(), "package demo: ") {
			t.Errorf("Objects(%q): %v, want an error naming the package", bad, err)
		}
	}
}

func TestVersion(t *testing.T) {
	for image, want := range map[string]string{
		"docker.io/flannel/flannel:v0.27.4": "v0.27.4", "registry.local:5000/a/b:1.2": "1.2", "registry.local:5000/a/b": "",
		"docker.io/x/y:v1@sha256:" + strings.Repeat("a", 64): "v1",
	} {
		if got := Version(image); got != want {
			t.Errorf("Version(%s) = %q, want %q", image, got, want)
		}
	}
}

// demoManifest is a package as the stick's are made: a Namespace, a CRD
// and an object of its kind, RBAC, a ConfigMap and a DaemonSet.
const demoManifest = `apiVersion: v1
kind: Namespace
metadata: {name: demo}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.demo.example}
spec:
  group: demo.example
  names: {kind: Widget, plural: widgets, singular: widget}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
---
apiVersion: demo.example/v1
kind: Widget
metadata: {name: default, namespace: demo}
size: 3
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: demo, namespace: demo}
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
      serviceAccountName: demo
      containers: [{name: demo, image: registry.example/demo:v1}]
`

// Against a real kube-apiserver (no kube-controller-manager, so the test
// writes the DaemonSet's status as its controller would): a package's
// objects are applied, a kind the package defines included; its
// DaemonSet is not ready until rolled out; applying again changes
// nothing; removing it deletes its objects but its CRD and Namespace,
// and a second removal finds nothing left.
func TestApplyReadyRemove(t *testing.T) {
	env := kubetest.Start(t)
	ctx := context.Background()
	c, err := New(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Objects("demo", demoManifest)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(ctx, objs); err != nil {
		t.Fatal(err)
	}
	ds, err := env.Client.AppsV1().DaemonSets("demo").Get(ctx, "demo-ds", metav1.GetOptions{})
	if err != nil || ds.Labels[LabelPackage] != "demo" || ds.ManagedFields[0].Manager != FieldManager {
		t.Fatalf("the DaemonSet: %v %v", err, ds)
	}
	missing, err := c.NotReady(ctx, objs)
	if err != nil || len(missing) != 1 || missing[0] != "DaemonSet demo/demo-ds: its controller has not seen generation 1 yet" {
		t.Errorf("NotReady before its controller saw it: %q, %v", missing, err)
	}
	// Its controller: scheduled on two nodes, one pod ready.
	ds.Status.ObservedGeneration, ds.Status.DesiredNumberScheduled, ds.Status.UpdatedNumberScheduled, ds.Status.NumberReady = 1, 2, 2, 1
	if ds, err = env.Client.AppsV1().DaemonSets("demo").UpdateStatus(ctx, ds, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if missing, err := c.NotReady(ctx, objs); err != nil || !slices.Equal(missing, []string{"DaemonSet demo/demo-ds: 2 of 2 pods updated, 1 ready"}) {
		t.Errorf("NotReady with one of two pods ready: %q, %v", missing, err)
	}
	ds.Status.NumberReady = 2
	if ds, err = env.Client.AppsV1().DaemonSets("demo").UpdateStatus(ctx, ds, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if missing, err := c.NotReady(ctx, objs); err != nil || len(missing) != 0 {
		t.Errorf("NotReady, all rolled out: %q, %v", missing, err)
	}

	// Again: nothing changes.
	if err := c.Apply(ctx, objs); err != nil {
		t.Fatal(err)
	}
	if again, err := env.Client.AppsV1().DaemonSets("demo").Get(ctx, "demo-ds", metav1.GetOptions{}); err != nil || again.ResourceVersion != ds.ResourceVersion {
		t.Errorf("applying again changed the DaemonSet (%v)", err)
	}

	left, err := c.Remove(ctx, objs)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("removing: %v", left)
	for _, get := range []func() error{
		func() error {
			_, err := env.Client.AppsV1().DaemonSets("demo").Get(ctx, "demo-ds", metav1.GetOptions{})
			return err
		},
		func() error {
			_, err := env.Client.CoreV1().ConfigMaps("demo").Get(ctx, "demo-cfg", metav1.GetOptions{})
			return err
		},
		func() error {
			_, err := env.Client.CoreV1().ServiceAccounts("demo").Get(ctx, "demo", metav1.GetOptions{})
			return err
		},
	} {
		if err := get(); !apierrors.IsNotFound(err) {
			t.Errorf("an object of the removed package is still there (%v)", err)
		}
	}
	if _, err := env.Client.CoreV1().Namespaces().Get(ctx, "demo", metav1.GetOptions{}); err != nil {
		t.Errorf("removing the package deleted its Namespace: %v", err)
	}
	if left, err := c.Remove(ctx, objs); err != nil || len(left) != 0 {
		t.Errorf("a second removal: %v left, %v", left, err)
	}
	// The CRD stays, and so do the objects users made of its kind; the
	// package's own Widget went.
	if missing, err := c.NotReady(ctx, objs[:2]); err != nil || len(missing) != 0 {
		t.Errorf("the package's Namespace and CRD after its removal: %q, %v", missing, err)
	}
	if missing, err := c.NotReady(ctx, objs[2:3]); err != nil || !slices.Equal(missing, []string{"Widget demo/default is missing"}) {
		t.Errorf("the package's Widget after its removal: %q, %v", missing, err)
	}
}
