// Package kube is bootstick's one way to reach a cluster, through client-go:
// readiness checked with the cluster's own CA, server-side apply of
// unstructured objects and manifest files, waits for nodes, rollouts and
// pods, the control-plane taint, a typed List of any resource, and the
// listing by label and deletion of objects by identity. It is a
// plain client: it knows no site, no rendered object and no kind of
// metal3's or the BPA's; the read models built on it live elsewhere
// (hoststate). Nothing here runs kubectl.
package kube

import (
	"fmt"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
)

// FieldManager owns every field bootstick applies.
const FieldManager = "bootstick"

// Client reaches one cluster.
type Client struct {
	Config *rest.Config
	CS     kubernetes.Interface
	// Manager owns the fields the client applies; FieldManager when
	// empty.
	Manager string
	dyn     dynamic.Interface
	mapper  *restmapper.DeferredDiscoveryRESTMapper
}

// manager is who owns the fields c applies.
func (c *Client) manager() string {
	if c.Manager != "" {
		return c.Manager
	}
	return FieldManager
}

// Load reads a kubeconfig file and connects to its cluster.
func Load(kubeconfig string) (*Client, error) {
	cfg, err := ReadConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	return New(cfg)
}

// ReadConfig reads a kubeconfig file, for a caller that adjusts it (a
// timeout, say) before New.
func ReadConfig(kubeconfig string) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("reading kubeconfig %s: %w", kubeconfig, err)
	}
	return cfg, nil
}

// New connects to the cluster cfg names. Nothing is sent yet.
func New(cfg *rest.Config) (*Client, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to the cluster: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to the cluster: %w", err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to the cluster: %w", err)
	}
	return &Client{Config: cfg, CS: cs, dyn: dyn,
		mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))}, nil
}
