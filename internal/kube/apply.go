package kube

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/bootstick/bootstick/internal/kubeyaml"
)

// Apply server-side-applies the objects in order, as field manager
// "bootstick", taking over fields other managers set, and waits for each
// CRD to be established. Applying the same objects again changes nothing
// (resourceVersions stay).
func (c *Client) Apply(ctx context.Context, objs []*unstructured.Unstructured) error {
	for _, u := range objs {
		if err := c.apply(ctx, u); err != nil {
			return err
		}
	}
	return nil
}

// ApplyFS applies the named YAML files of fsys in order (e.g. manifests.FS
// and manifests.Files()).
func (c *Client) ApplyFS(ctx context.Context, fsys fs.FS, names []string) error {
	for _, n := range names {
		data, err := fs.ReadFile(fsys, n)
		if err != nil {
			return fmt.Errorf("reading manifest: %w", err)
		}
		objs, err := kubeyaml.Decode(bytes.NewReader(data))
		if err != nil {
			return fmt.Errorf("reading manifest %s: %w", n, err)
		}
		if err := c.Apply(ctx, objs); err != nil {
			return fmt.Errorf("manifest %s: %w", n, err)
		}
	}
	return nil
}

func (c *Client) resource(u *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := u.GroupVersionKind()
	m, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		// A CRD applied a moment ago: look again.
		c.mapper.Reset()
		m, err = c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if err != nil {
		return nil, err
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		return c.dyn.Resource(m.Resource).Namespace(u.GetNamespace()), nil
	}
	return c.dyn.Resource(m.Resource), nil
}

// Describe names an object as kubectl does: its kind, then
// namespace/name.
func Describe(u *unstructured.Unstructured) string {
	if ns := u.GetNamespace(); ns != "" {
		return u.GetKind() + " " + ns + "/" + u.GetName()
	}
	return u.GetKind() + " " + u.GetName()
}

// Read reads the object u names, as the cluster has it (an error that
// apierrors.IsNotFound knows when it has none).
func (c *Client) Read(ctx context.Context, u *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	ri, err := c.resource(u)
	if err != nil {
		return nil, err
	}
	return ri.Get(ctx, u.GetName(), metav1.GetOptions{})
}

// DeleteObject deletes the object u names, leaving what it owns to the
// garbage collector (a DaemonSet's pods). Its kind unknown to the cluster
// is meta.IsNoMatchError's, its absence apierrors.IsNotFound's.
func (c *Client) DeleteObject(ctx context.Context, u *unstructured.Unstructured) error {
	ri, err := c.resource(u)
	if err != nil {
		return err
	}
	policy := metav1.DeletePropagationBackground
	return ri.Delete(ctx, u.GetName(), metav1.DeleteOptions{PropagationPolicy: &policy})
}

func (c *Client) apply(ctx context.Context, u *unstructured.Unstructured) error {
	what := Describe(u)
	ri, err := c.resource(u)
	if err != nil {
		return fmt.Errorf("applying %s: %w", what, err)
	}
	if _, err := ri.Apply(ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: c.manager(), Force: true}); err != nil {
		// The API server names fields, never Secret values, in its errors.
		return fmt.Errorf("applying %s: %w", what, err)
	}
	if u.GetKind() == "CustomResourceDefinition" && u.GetAPIVersion() == "apiextensions.k8s.io/v1" {
		if err := c.waitEstablished(ctx, u.GetName()); err != nil {
			return fmt.Errorf("applying %s: %w", what, err)
		}
	}
	return nil
}

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

func (c *Client) waitEstablished(ctx context.Context, name string) error {
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		crd, err := c.dyn.Resource(crdResource).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
		for _, cond := range conds {
			m, _ := cond.(map[string]any)
			if m["type"] == "Established" && m["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the CRD to be established: %w", err)
	}
	c.mapper.Reset()
	return nil
}
