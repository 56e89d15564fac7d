package kube

import (
	"context"
	"fmt"
	"sort"

	metal3 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/bootstick/bootstick/internal/render"
)

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
func (c *Client) HostStates(ctx context.Context) ([]HostState, error) {
	list, err := c.dyn.Resource(bmhResource).Namespace(render.Namespace).List(ctx, metav1.ListOptions{})
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
			Role:              h.Labels[render.LabelRole],
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
