package sitestep

import (
	"context"
	"fmt"
	"maps"
	"slices"

	metal3 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/bootstick/bootstick/internal/kube"
	"github.com/bootstick/bootstick/internal/logctx"
	"github.com/bootstick/bootstick/internal/render"
)

var (
	bmhResource    = metal3.GroupVersion.WithResource("baremetalhosts")
	secretResource = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
)

// hostObjects selects the objects render labels as a host's.
var hostObjects = render.LabelManagedBy + "=bootstick," + render.LabelHost

// Stale chooses, among objs, the ones the site step made for hosts the
// site no longer names: in the site's namespace, labelled by render as a
// host's (render.LabelHost, not in keep) of this cluster, one render
// makes for that host (render.IsHostObject: its BareMetalHost and its
// BMC, user-data and network-data Secrets), and applied by bootstick
// (server-side apply as kube.FieldManager). Anything else stays, even
// with the labels copied onto it. The order of objs is kept.
func Stale(objs []unstructured.Unstructured, cluster string, keep []string) []unstructured.Unstructured {
	var out []unstructured.Unstructured
	for _, u := range objs {
		l := u.GetLabels()
		host := l[render.LabelHost]
		if u.GetNamespace() != render.Namespace || host == "" || slices.Contains(keep, host) ||
			l[render.LabelManagedBy] != "bootstick" || l[render.LabelCluster] != cluster ||
			!render.IsHostObject(u.GetKind(), u.GetName(), host) || !appliedByUs(u) {
			continue
		}
		out = append(out, u)
	}
	return out
}

// appliedByUs reports whether bootstick applied u (server-side apply).
func appliedByUs(u unstructured.Unstructured) bool {
	return slices.ContainsFunc(u.GetManagedFields(), func(m metav1.ManagedFieldsEntry) bool {
		return m.Manager == kube.FieldManager && m.Operation == metav1.ManagedFieldsOperationApply
	})
}

// Removal is what Prune did for a host the site no longer names.
type Removal struct {
	Host string
	// Deleting says its BareMetalHost is still there: the
	// baremetal-operator deprovisions the host (its finalizer) before it
	// goes. Its Secrets stay until then (the operator reads its BMC
	// credentials, and a virtual-media host's network data, to
	// deprovision it); a later Prune deletes them.
	Deleting bool
	// PausedBy is the value of the operator's paused annotation when
	// someone other than the site step paused the host, still there: the
	// operator deprovisions it only once that is lifted.
	PausedBy string
}

// Prune deletes what the site step made for hosts the site (cluster,
// hosts keep) no longer names (Stale): each BareMetalHost first, then
// the host's Secrets once its BareMetalHost is gone. Pruning again
// changes nothing more than what the operator finished since. It
// returns the hosts removed, in name order.
func Prune(ctx context.Context, c *kube.Client, cluster string, keep []string) ([]Removal, error) {
	log := logctx.From(ctx)
	bmhs, err := c.ListObjects(ctx, bmhResource, render.Namespace, hostObjects)
	if err != nil {
		return nil, fmt.Errorf("pruning hosts: %w", err)
	}
	secrets, err := c.ListObjects(ctx, secretResource, render.Namespace, hostObjects)
	if err != nil {
		return nil, fmt.Errorf("pruning hosts: %w", err)
	}
	byHost := map[string]*Removal{}
	removal := func(u unstructured.Unstructured) *Removal {
		h := u.GetLabels()[render.LabelHost]
		if byHost[h] == nil {
			byHost[h] = &Removal{Host: h}
		}
		return byHost[h]
	}
	for _, u := range Stale(bmhs, cluster, keep) {
		r := removal(u)
		if p := u.GetAnnotations()[metal3.PausedAnnotation]; p != HoldValue {
			r.PausedBy = p
		}
		if u.GetDeletionTimestamp() != nil {
			continue // being deleted already
		}
		if err := c.Delete(ctx, bmhResource, u.GetNamespace(), u.GetName(), u.GetUID()); err != nil {
			return nil, fmt.Errorf("pruning host %s: %w", r.Host, err)
		}
		log.Info("deleted the BareMetalHost of a host the site no longer names", "host", r.Host)
	}
	// Which hosts still have a BareMetalHost, ours or anyone's: a held
	// host (never registered) goes at once, a registered one after the
	// operator's deprovisioning.
	all, err := c.ListObjects(ctx, bmhResource, render.Namespace, "")
	if err != nil {
		return nil, fmt.Errorf("pruning hosts: %w", err)
	}
	present := map[string]bool{}
	for _, u := range all {
		present[u.GetName()] = true
	}
	for _, u := range Stale(secrets, cluster, keep) {
		r := removal(u)
		if present[r.Host] || u.GetDeletionTimestamp() != nil {
			continue
		}
		if err := c.Delete(ctx, secretResource, u.GetNamespace(), u.GetName(), u.GetUID()); err != nil {
			return nil, fmt.Errorf("pruning host %s: %w", r.Host, err)
		}
		log.Info("deleted a Secret of a host the site no longer names", "host", r.Host, "secret", u.GetName())
	}
	out := make([]Removal, 0, len(byHost))
	for _, h := range slices.Sorted(maps.Keys(byHost)) {
		r := byHost[h]
		r.Deleting = present[h]
		if !r.Deleting {
			r.PausedBy = "" // gone, paused or not
		}
		out = append(out, *r)
	}
	return out, nil
}
