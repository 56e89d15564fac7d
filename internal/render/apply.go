package render

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"sort"
	"time"

	metal3 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// FieldManager owns every field bootstick applies.
const FieldManager = "bootstick"

// Applier server-side-applies objects, resolving kinds through discovery.
type Applier struct {
	dyn    dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
}

// NewApplier connects to the cluster cfg names.
func NewApplier(cfg *rest.Config) (*Applier, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to the cluster: %w", err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to the cluster: %w", err)
	}
	return &Applier{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))}, nil
}

// Apply server-side-applies the rendered objects in order, as field
// manager "bootstick", taking over fields other managers set. Applying the
// same objects again changes nothing (resourceVersions stay).
func Apply(ctx context.Context, cfg *rest.Config, objs []Object) error {
	us, err := Unstructured(objs)
	if err != nil {
		return err
	}
	a, err := NewApplier(cfg)
	if err != nil {
		return err
	}
	return a.Apply(ctx, us)
}

// Apply applies the objects in order.
func (a *Applier) Apply(ctx context.Context, objs []*unstructured.Unstructured) error {
	for _, u := range objs {
		if err := a.apply(ctx, u); err != nil {
			return err
		}
	}
	return nil
}

func (a *Applier) resource(u *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := u.GroupVersionKind()
	m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		// A CRD applied a moment ago: look again.
		a.mapper.Reset()
		m, err = a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if err != nil {
		return nil, err
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		return a.dyn.Resource(m.Resource).Namespace(u.GetNamespace()), nil
	}
	return a.dyn.Resource(m.Resource), nil
}

func (a *Applier) apply(ctx context.Context, u *unstructured.Unstructured) error {
	what := u.GetKind() + " " + u.GetName()
	if ns := u.GetNamespace(); ns != "" {
		what = u.GetKind() + " " + ns + "/" + u.GetName()
	}
	ri, err := a.resource(u)
	if err != nil {
		return fmt.Errorf("applying %s: %w", what, err)
	}
	if _, err := ri.Apply(ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: FieldManager, Force: true}); err != nil {
		// The API server names fields, never Secret values, in its errors.
		return fmt.Errorf("applying %s: %w", what, err)
	}
	if u.GetKind() == "CustomResourceDefinition" && u.GetAPIVersion() == "apiextensions.k8s.io/v1" {
		if err := a.waitEstablished(ctx, u.GetName()); err != nil {
			return fmt.Errorf("applying %s: %w", what, err)
		}
	}
	return nil
}

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

func (a *Applier) waitEstablished(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		crd, err := a.dyn.Resource(crdResource).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
			for _, c := range conds {
				m, _ := c.(map[string]any)
				if m["type"] == "Established" && m["status"] == "True" {
					a.mapper.Reset()
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the CRD to be established: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// DecodeYAML reads every object of a multi-document YAML stream.
func DecodeYAML(r io.Reader) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, err
		}
		if len(m) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
}

// ReadManifest decodes the objects of the YAML file name in fsys.
func ReadManifest(fsys fs.FS, name string) ([]*unstructured.Unstructured, error) {
	data, err := fs.ReadFile(fsys, name)
	if err != nil {
		return nil, fmt.Errorf("reading manifest: %w", err)
	}
	objs, err := DecodeYAML(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("reading manifest %s: %w", name, err)
	}
	return objs, nil
}

// ApplyFS applies the named YAML files of fsys in order (e.g. manifests.FS
// and manifests.Files()), waiting for each CRD to be established.
func ApplyFS(ctx context.Context, cfg *rest.Config, fsys fs.FS, names []string) error {
	a, err := NewApplier(cfg)
	if err != nil {
		return err
	}
	for _, n := range names {
		objs, err := ReadManifest(fsys, n)
		if err != nil {
			return err
		}
		if err := a.Apply(ctx, objs); err != nil {
			return fmt.Errorf("manifest %s: %w", n, err)
		}
	}
	return nil
}

// HostState is one BareMetalHost's state, for firstboot status.
type HostState struct {
	Name string `json:"name"`
	// Role is the host's role label.
	Role string `json:"role,omitempty"`
	// BootMACAddress is the host's boot MAC address.
	BootMACAddress string `json:"bootMACAddress"`
	// State is the provisioning state ("registering", "available",
	// "provisioned", ...); empty until the baremetal-operator sees it.
	State string `json:"state"`
	// OperationalStatus is OK, discovered, error, ...
	OperationalStatus string `json:"operationalStatus,omitempty"`
	PoweredOn         bool   `json:"poweredOn"`
	// Error is the operator's error message, if any.
	Error string `json:"error,omitempty"`
}

var bmhResource = metal3.GroupVersion.WithResource("baremetalhosts")

// HostStates lists the BareMetalHosts of the site namespace, in name order.
func HostStates(ctx context.Context, cfg *rest.Config) ([]HostState, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to the cluster: %w", err)
	}
	list, err := dyn.Resource(bmhResource).Namespace(Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing BareMetalHosts: %w", err)
	}
	out := make([]HostState, 0, len(list.Items))
	for _, item := range list.Items {
		var h metal3.BareMetalHost
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(item.Object, &h); err != nil {
			return nil, fmt.Errorf("reading BareMetalHost %s: %w", item.GetName(), err)
		}
		out = append(out, HostState{
			Name:              h.Name,
			Role:              h.Labels[LabelRole],
			BootMACAddress:    h.Spec.BootMACAddress,
			State:             string(h.Status.Provisioning.State),
			OperationalStatus: string(h.Status.OperationalStatus),
			PoweredOn:         h.Status.PoweredOn,
			Error:             h.Status.ErrorMessage,
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
