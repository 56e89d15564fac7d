package kubetest

import (
	"context"
	"syscall"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
)

var widgets = schema.GroupVersionResource{Group: "test.bootstick.dev", Version: "v1", Resource: "widgets"}

func widgetCRD() *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.test.bootstick.dev"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "test.bootstick.dev",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {Type: "object", Required: []string{"size"}, Properties: map[string]apiextensionsv1.JSONSchemaProps{
							"size": {Type: "integer", Minimum: ptr(1.0)},
						}},
					},
				}},
			}},
		},
	}
}

func ptr[T any](v T) *T { return &v }

// TestCustomResourceLifecycle installs a CRD in a real apiserver and
// creates, updates and deletes a custom resource, as bootstick's own CRDs
// (Provisioning, BareMetalHost) will be.
func TestCustomResourceLifecycle(t *testing.T) {
	if testing.Short() {
		t.Skip("integration: starts the toolchain's etcd and kube-apiserver (run without -short, as make test does)")
	}
	env := Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	ext, err := apiextensions.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, widgetCRD(), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating CRD: %v", err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		crd, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, "widgets.test.bootstick.dev", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range crd.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("CRD never became Established: %v", err)
	}

	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	res := dyn.Resource(widgets).Namespace("default")
	w := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "test.bootstick.dev/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "w1"},
		"spec":     map[string]any{"size": int64(3)},
	}}
	created, err := res.Create(ctx, w, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating widget: %v", err)
	}

	// The schema is enforced by the real apiserver.
	bad := w.DeepCopy()
	bad.SetName("w2")
	unstructured.SetNestedField(bad.Object, int64(0), "spec", "size")
	if _, err := res.Create(ctx, bad, metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Fatalf("creating a widget with size 0: got %v, want an Invalid error from the schema", err)
	}

	unstructured.SetNestedField(created.Object, int64(5), "spec", "size")
	updated, err := res.Update(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("updating widget: %v", err)
	}
	if updated.GetResourceVersion() == created.GetResourceVersion() {
		t.Fatal("update did not change the resourceVersion")
	}
	got, err := res.Get(ctx, "w1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if size, _, _ := unstructured.NestedInt64(got.Object, "spec", "size"); size != 5 {
		t.Fatalf("size after update = %d, want 5", size)
	}

	if err := res.Delete(ctx, "w1", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting widget: %v", err)
	}
	if _, err := res.Get(ctx, "w1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("get after delete: got %v, want NotFound", err)
	}
}

// TestStopLeavesNoProcess checks that Stop ends etcd and kube-apiserver.
func TestStopLeavesNoProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("integration: starts the toolchain's etcd and kube-apiserver (run without -short, as make test does)")
	}
	env := Start(t)
	pids := env.Running()
	if len(pids) != 2 {
		t.Fatalf("running processes = %v, want etcd and kube-apiserver", pids)
	}
	if _, err := env.Client.Discovery().ServerVersion(); err != nil {
		t.Fatalf("apiserver does not answer: %v", err)
	}
	env.Stop()
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("process %d still exists after Stop", pid)
		}
	}
}
