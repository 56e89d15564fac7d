// Package addons installs an application cluster's container packages
// (the add-ons the stick carries, the seed's "packages that can be done via
// kubectl") through the cluster's own API, with its admin kubeconfig: it
// orders them by what each goes after, applies each one's objects, says
// what of them is not ready yet, and removes them.
package addons

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/bootstick/bootstick/internal/kube"
	"github.com/bootstick/bootstick/internal/kubeyaml"
)

// LabelPackage marks every object of a package with the package's name.
const LabelPackage = "bpa.akraino.org/package"

// FieldManager owns the fields the BPA applies.
const FieldManager = "bpa"

// Order returns names so that each comes after the names it goes after
// (after[name]) that are among names too; otherwise by name. A cycle is
// an error naming its packages.
func Order(names []string, after map[string][]string) ([]string, error) {
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	pending := slices.Sorted(func(yield func(string) bool) {
		for n := range want {
			if !yield(n) {
				return
			}
		}
	})
	done := map[string]bool{}
	var out []string
	for len(pending) > 0 {
		progress := false
		for i := 0; i < len(pending); i++ {
			n := pending[i]
			ready := true
			for _, a := range after[n] {
				if want[a] && !done[a] {
					ready = false
				}
			}
			if ready {
				out, done[n] = append(out, n), true
				pending = slices.Delete(pending, i, i+1)
				progress = true
				break // the first ready by name, then look again from the start
			}
		}
		if !progress {
			return nil, fmt.Errorf("packages %s go after one another in a circle", strings.Join(pending, ", "))
		}
	}
	return out, nil
}

// Objects are the objects of a package's manifest (YAML documents), each
// labelled with the package's name.
func Objects(pkg, manifest string) ([]*unstructured.Unstructured, error) {
	objs, err := kubeyaml.Decode(strings.NewReader(manifest))
	if err != nil {
		return nil, fmt.Errorf("package %s: reading its manifest: %w", pkg, err)
	}
	for _, u := range objs {
		if u.GetKind() == "" || u.GetName() == "" {
			return nil, fmt.Errorf("package %s: an object of its manifest has no kind or name", pkg)
		}
		labels := u.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		labels[LabelPackage] = pkg
		u.SetLabels(labels)
	}
	return objs, nil
}

// Cluster is an application cluster's API, as the package installer uses
// it: a kube.Client whose applied fields the BPA owns.
type Cluster struct{ kc *kube.Client }

// New connects to the cluster that cfg names.
func New(cfg *rest.Config) (*Cluster, error) {
	kc, err := kube.New(cfg)
	if err != nil {
		return nil, err
	}
	kc.Manager = FieldManager
	return &Cluster{kc: kc}, nil
}

// Apply applies the objects in their order with server-side apply, taking
// the fields the BPA owns from whoever changed them; objects of a kind a
// package defines wait for its CRD to be served.
func (c *Cluster) Apply(ctx context.Context, objs []*unstructured.Unstructured) error {
	return c.kc.Apply(ctx, objs)
}

// NotReady says, one line per object, what of objs the cluster does not
// have ready yet: an object it lacks, a DaemonSet, Deployment or
// StatefulSet not yet rolled out everywhere it should run, a
// CustomResourceDefinition not yet established. Nothing: all is ready.
func (c *Cluster) NotReady(ctx context.Context, objs []*unstructured.Unstructured) ([]string, error) {
	var out []string
	for _, u := range objs {
		got, err := c.kc.Read(ctx, u)
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			out = append(out, kube.Describe(u)+" is missing")
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", kube.Describe(u), err)
		}
		if why := notReady(got); why != "" {
			out = append(out, kube.Describe(u)+": "+why)
		}
	}
	return out, nil
}

// notReady says why a workload is not rolled out, or a CRD not
// established; "" when it is (or is of another kind).
func notReady(u *unstructured.Unstructured) string {
	num := func(path ...string) int64 {
		n, _, _ := unstructured.NestedInt64(u.Object, path...)
		return n
	}
	if g := num("status", "observedGeneration"); u.GroupVersionKind().Group == "apps" && g < u.GetGeneration() {
		return fmt.Sprintf("its controller has not seen generation %d yet", u.GetGeneration())
	}
	switch u.GroupVersionKind().GroupKind() {
	case schema.GroupKind{Group: "apps", Kind: "DaemonSet"}:
		want := num("status", "desiredNumberScheduled")
		if up, ready := num("status", "updatedNumberScheduled"), num("status", "numberReady"); up < want || ready < want {
			return fmt.Sprintf("%d of %d pods updated, %d ready", up, want, ready)
		}
	case schema.GroupKind{Group: "apps", Kind: "Deployment"}, schema.GroupKind{Group: "apps", Kind: "StatefulSet"}:
		want, ok, _ := unstructured.NestedInt64(u.Object, "spec", "replicas")
		if !ok {
			want = 1
		}
		if up, ready := num("status", "updatedReplicas"), num("status", "readyReplicas"); up < want || ready < want {
			return fmt.Sprintf("%d of %d replicas updated, %d ready", up, want, ready)
		}
	case schema.GroupKind{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}:
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
				return ""
			}
		}
		return "not established yet"
	}
	return ""
}

// Kept are the kinds Remove leaves: deleting a CustomResourceDefinition
// deletes every object of its kind that users made (their
// NetworkAttachmentDefinitions, say), and deleting a Namespace everything
// in it.
var Kept = []string{"CustomResourceDefinition", "Namespace"}

// Remove deletes the objects, the last first, but for the kinds Kept, and
// returns those still there (being deleted): nothing once all are gone.
func (c *Cluster) Remove(ctx context.Context, objs []*unstructured.Unstructured) ([]string, error) {
	var left []string
	for _, u := range slices.Backward(objs) {
		if slices.Contains(Kept, u.GetKind()) {
			continue
		}
		err := c.kc.DeleteObject(ctx, u)
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			continue // gone, or its kind went with its CRD and it with it
		}
		if err != nil {
			return nil, fmt.Errorf("removing %s: %w", kube.Describe(u), err)
		}
		left = append(left, kube.Describe(u))
	}
	sort.Strings(left)
	return left, nil
}

// Version is a package's version as its image's tag says it
// (docker.io/flannel/flannel:v0.27.4 is v0.27.4); "" for an image by
// digest only.
func Version(image string) string {
	name, _, _ := strings.Cut(image, "@")
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		return name[i+1:]
	}
	return ""
}
