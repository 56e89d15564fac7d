// Package hoststate reads the site's hosts as a cluster sees them: each
// metal3 BareMetalHost's provisioning state, errors and history, and the
// BPA's view of each host from the site's Provisionings. Status and the
// site step read hosts through it; it only reads, through a kube.Client.
package hoststate

import (
	"context"
	"sort"
	"time"

	metal3 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	bpa "github.com/bootstick/bootstick/internal/bpa/v1alpha1"
	"github.com/bootstick/bootstick/internal/kube"
	"github.com/bootstick/bootstick/internal/render"
)

// Host is one BareMetalHost's state, for firstboot status.
type Host struct {
	Name string `json:"name"`
	// UID is the BareMetalHost's: a host made again gets a new one.
	UID string `json:"-"`
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
	// ErrorType is the operator's class of error ("registration error",
	// "inspection error", ...), and Error its message, if any.
	ErrorType string `json:"errorType,omitempty"`
	Error     string `json:"error,omitempty"`
	// ErrorCount counts the operator's failed tries since the last
	// success; the message clears while it tries again, the count stays.
	ErrorCount int `json:"errorCount,omitempty"`
	// Since is when the host entered its state, from the operator's
	// operation history; zero when unknown.
	Since time.Time `json:"since,omitzero"`
	// Paused is the value of the operator's paused annotation: the
	// operator leaves the host alone while it is there.
	Paused string `json:"paused,omitempty"`
	// History is the operator's record of when registration, inspection,
	// provisioning and deprovisioning started and ended.
	History metal3.OperationHistory `json:"-"`
}

// since is when a host entered its state: the start of the operation the
// state belongs to, or the end of the one that led to it.
func since(st metal3.ProvisioningState, h metal3.OperationHistory) time.Time {
	var t metav1.Time
	switch st {
	case metal3.StateRegistering:
		t = h.Register.Start
	case metal3.StateInspecting:
		t = h.Inspect.Start
	case metal3.StateProvisioning:
		t = h.Provision.Start
	case metal3.StateProvisioned:
		t = h.Provision.End
	case metal3.StateDeprovisioning:
		t = h.Deprovision.Start
	case metal3.StateAvailable, metal3.StatePreparing:
		t = h.Inspect.End
		if t.IsZero() {
			t = h.Register.End
		}
	}
	return t.Time
}

var (
	bmhResource          = metal3.GroupVersion.WithResource("baremetalhosts")
	provisioningResource = bpa.GroupVersion.WithResource("provisionings")
)

// List reads the BareMetalHosts of the site namespace, in name order.
func List(ctx context.Context, c *kube.Client) ([]Host, error) {
	bmhs, err := kube.List[metal3.BareMetalHost](ctx, c, bmhResource, render.Namespace)
	if err != nil {
		return nil, err
	}
	out := make([]Host, 0, len(bmhs))
	for i := range bmhs {
		h := &bmhs[i]
		out = append(out, Host{
			Name:              h.Name,
			UID:               string(h.UID),
			Role:              h.Labels[render.LabelRole],
			BootMACAddress:    h.Spec.BootMACAddress,
			State:             string(h.Status.Provisioning.State),
			OperationalStatus: string(h.Status.OperationalStatus),
			PoweredOn:         h.Status.PoweredOn,
			ErrorType:         string(h.Status.ErrorType),
			Error:             h.Status.ErrorMessage,
			ErrorCount:        h.Status.ErrorCount,
			Since:             since(h.Status.Provisioning.State, h.Status.OperationHistory),
			History:           h.Status.OperationHistory,
			Paused:            h.Annotations[metal3.PausedAnnotation],
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// ClusterHosts are the BPA's view of each host (by name) of the site's
// Provisionings: its install state, phases and last error.
func ClusterHosts(ctx context.Context, c *kube.Client) (map[string]bpa.HostStatus, error) {
	provs, err := kube.List[bpa.Provisioning](ctx, c, provisioningResource, render.Namespace)
	if err != nil {
		return nil, err
	}
	out := map[string]bpa.HostStatus{}
	for _, p := range provs {
		for _, h := range p.Status.Hosts {
			out[h.Name] = h
		}
	}
	return out, nil
}
