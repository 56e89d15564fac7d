package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// Options tune Run.
type Options struct {
	// MetricsAddr and ProbeAddr are listen addresses; "0" turns each off.
	MetricsAddr, ProbeAddr string
	// LeaderElect makes one replica of several do the work, holding a
	// Lease named LeaderElectionID in LeaderElectionNamespace.
	LeaderElect             bool
	LeaderElectionNamespace string
	// LeaseDuration, RenewDeadline and RetryPeriod time the election;
	// zero takes controller-runtime's defaults (15 s, 10 s, 2 s).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// SkipNameValidation lets one process run the manager more than once
	// (tests).
	SkipNameValidation bool
	// Namespaces are those the BPA serves: it sees Provisionings,
	// BareMetalHosts and the install's ConfigMap and Secrets there only.
	// Empty: DefaultNamespace.
	Namespaces []string
}

// DefaultNamespace is where firstboot's site step renders every site
// object (internal/render.Namespace; the BPA links nothing outside
// internal/bpa, and a test holds the two equal).
const DefaultNamespace = "metal3"

// cacheOptions watches only the namespaces the BPA serves, so it needs a
// Role in each and no ClusterRole.
func cacheOptions(namespaces []string) cache.Options {
	if len(namespaces) == 0 {
		namespaces = []string{DefaultNamespace}
	}
	o := cache.Options{DefaultNamespaces: map[string]cache.Config{}}
	for _, ns := range namespaces {
		o.DefaultNamespaces[ns] = cache.Config{}
	}
	return o
}

// clientOptions reads Secrets and ConfigMaps from the API server, never
// from a cache: the BPA reads two objects of those kinds by name (the SSH
// key, the install's ConfigMap) and writes one (the kubeconfig), and a
// cache would list and watch every one of the namespace, BMC credentials
// included, and need the right to.
func clientOptions() client.Options {
	return client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}, &corev1.ConfigMap{}}}}
}

// nonZero is d, or nil (the default) for zero.
func nonZero(d time.Duration) *time.Duration {
	if d == 0 {
		return nil
	}
	return &d
}

// LeaderElectionID names the BPA's Lease.
const LeaderElectionID = "bpa.akraino.org"

// Run runs the reconciler until ctx ends.
func Run(ctx context.Context, cfg *rest.Config, o Options) error {
	s, err := Scheme()
	if err != nil {
		return err
	}
	if o.MetricsAddr == "" {
		o.MetricsAddr = "0"
	}
	if o.ProbeAddr == "" {
		o.ProbeAddr = "0"
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        s,
		Cache:                         cacheOptions(o.Namespaces),
		Client:                        clientOptions(),
		Metrics:                       metricsserver.Options{BindAddress: o.MetricsAddr},
		HealthProbeBindAddress:        o.ProbeAddr,
		LeaderElection:                o.LeaderElect,
		LeaderElectionID:              LeaderElectionID,
		LeaderElectionNamespace:       o.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 nonZero(o.LeaseDuration),
		RenewDeadline:                 nonZero(o.RenewDeadline),
		RetryPeriod:                   nonZero(o.RetryPeriod),
		Controller:                    config.Controller{SkipNameValidation: &o.SkipNameValidation},
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	if err := (&Reconciler{Installs: true}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the provisioning controller: %w", err)
	}
	if err := (&PackagesReconciler{}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the container packages controller: %w", err)
	}
	if o.ProbeAddr != "0" {
		if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
			return fmt.Errorf("adding the health check: %w", err)
		}
		if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
			return fmt.Errorf("adding the ready check: %w", err)
		}
	}
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("running the manager: %w", err)
	}
	return nil
}
