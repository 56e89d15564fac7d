// Command bpa-operator is the binary provisioning agent: it matches each
// master and worker of every bpa.akraino.org Provisioning to the metal3.io
// BareMetalHost with its boot MAC address and reports each host's state in
// the Provisioning's status, in the namespaces --namespace names only. It runs in-cluster (images/recipes.yaml builds
// its image) or, for development, with --kubeconfig.
//
// It lives under internal/bpa so that the toolchain's cache key for its
// local recipe (the hash of this folder tree, go.mod and go.sum) covers
// every package of this repository it is built from.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/config"

	"github.com/bootstick/bootstick/internal/bpa/controller"
)

// version is stamped by the recipe (images/recipes.yaml).
var version = "dev"

func main() {
	var o controller.Options
	showVersion := flag.Bool("version", false, "print the version and exit")
	flag.StringVar(&o.MetricsAddr, "metrics-bind-address", "0", "listen address of the metrics endpoint (0: off)")
	flag.StringVar(&o.ProbeAddr, "health-probe-bind-address", ":8081", "listen address of /healthz and /readyz (0: off)")
	flag.BoolVar(&o.LeaderElect, "leader-elect", false, "elect a leader, so that only one replica works")
	flag.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", "", "namespace of the leader Lease (default: the pod's)")
	flag.DurationVar(&o.LeaseDuration, "leader-elect-lease-duration", 15*time.Second, "how long a leader's Lease lasts unrenewed")
	flag.DurationVar(&o.RenewDeadline, "leader-elect-renew-deadline", 10*time.Second, "how long the leader tries to renew before it gives up and exits")
	flag.DurationVar(&o.RetryPeriod, "leader-elect-retry-period", 2*time.Second, "how often a replica tries to take or renew the Lease")
	flag.Func("namespace", "a namespace whose Provisionings the BPA serves, with their BareMetalHosts, install ConfigMap and SSH key (repeat or separate with commas; default "+controller.DefaultNamespace+"); each needs the Role manifests/22-rbac-bpa.yaml gives in "+controller.DefaultNamespace, func(v string) error {
		for _, ns := range strings.Split(v, ",") {
			if ns = strings.TrimSpace(ns); ns != "" {
				o.Namespaces = append(o.Namespaces, ns)
			}
		}
		return nil
	})
	// config registers --kubeconfig on the default flag set.
	flag.Parse()
	if *showVersion {
		fmt.Println("bpa-operator", version)
		return
	}
	h := slog.NewJSONHandler(os.Stderr, nil)
	slog.SetDefault(slog.New(h))
	ctrl.SetLogger(logr.FromSlogHandler(h))

	cfg, err := config.GetConfig()
	if err != nil {
		slog.Error("no cluster to talk to", "err", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	slog.Info("bpa-operator starting", "version", version, "namespaces", o.Namespaces)
	if err := controller.Run(ctx, cfg, o); err != nil {
		slog.Error("bpa-operator failed", "err", err)
		os.Exit(1)
	}
}
