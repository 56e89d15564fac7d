package firstboot

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	flag "github.com/spf13/pflag"

	"github.com/bootstick/bootstick/internal/logctx"

	"github.com/bootstick/bootstick/internal/cli"
	"github.com/bootstick/bootstick/internal/datadisk"
	"github.com/bootstick/bootstick/internal/pipeline"
	"github.com/bootstick/bootstick/internal/site"
	"github.com/bootstick/bootstick/internal/status"
	"github.com/bootstick/bootstick/internal/supervise"
)

type runOptions struct {
	mode         string
	bundle       string
	site         string
	data         string
	binDir       string
	address      string
	nodeName     string
	registryAddr string
	dataDisk     string
	wipeDataDisk bool
	ageIdentity  string
	podSubnet    string
	svcSubnet    string
	timeout      time.Duration

	kindName      string // kind mode: the cluster's name
	kindNodeImage string // kind mode: the node image (default: nodeImage)
}

func init() {
	register(cli.Command{
		Name:  "run",
		Usage: "run [--mode appliance|host|kind] [--bundle DIR] [--site FILE] [--data DIR]",
		Short: "bring this machine up as the infra-local-controller, resuming where an earlier run stopped",
		Flags: func(fs *flag.FlagSet) func(ctx context.Context, args []string) error {
			var o runOptions
			fs.StringVar(&o.mode, "mode", "appliance", "appliance (the booted stick), host (this Linux host) or kind")
			fs.StringVar(&o.bundle, "bundle", "", "the bundle folder (or the OCI layout itself); default: the live medium's /bundle")
			fs.StringVar(&o.site, "site", "", "the site file")
			fs.StringVar(&o.data, "data", defaultData, "where persistent state lives (the data disk's mount point)")
			fs.StringVar(&o.binDir, "bin-dir", "", "where kubeadm and kubelet are (default: PATH, then $BOOTSTICK_CACHE/toolchain/current/bin)")
			fs.StringVar(&o.address, "address", "", "the node's address (default: the address of the default route)")
			fs.StringVar(&o.nodeName, "node-name", "", "the node's name (default: the host name)")
			fs.StringVar(&o.registryAddr, "registry", "127.0.0.1:5000", "the bundle registry's loopback listen address")
			fs.StringVar(&o.dataDisk, "data-disk", "", "appliance: the data disk (default: the site's bootstrap.dataDisk, else ours by label, else the first empty disk)")
			fs.BoolVar(&o.wipeDataDisk, "wipe-data-disk", false, "appliance: erase the named data disk even when it holds data")
			fs.StringVar(&o.ageIdentity, "age-identity", "", "age identity file for encrypted passwords (default: age/identity.txt on the data disk, when there)")
			fs.StringVar(&o.podSubnet, "pod-subnet", "", "this machine's cluster's pod CIDR (default: the site's bootstrap.podCIDR, else "+site.DefaultBootstrapPodCIDR+")")
			fs.StringVar(&o.svcSubnet, "service-subnet", "", "this machine's cluster's service CIDR (default: the site's bootstrap.serviceCIDR, else "+site.DefaultBootstrapServiceCIDR+")")
			fs.DurationVar(&o.timeout, "wait", 20*time.Minute, "how long to wait for the node, and for each Deployment firstboot applies, to be ready")
			fs.StringVar(&o.kindName, "kind-name", "bootstick", "kind: the kind cluster's name")
			fs.StringVar(&o.kindNodeImage, "kind-node-image", "", "kind: the node image, from the bundle or the engine, never pulled (default: the bundle's registry.bootstick.dev/kind-node, else kindest/node, at the bundle's Kubernetes version)")
			return func(ctx context.Context, args []string) error {
				if err := cli.NoArgs(args); err != nil {
					return err
				}
				return runFirstboot(ctx, o)
			}
		},
	})
	register(cli.Command{
		Name:  "supervise",
		Usage: "supervise --dir DIR --name NAME -- COMMAND [ARGS...]",
		Short: "(internal) keep one service running, for host mode without systemd",
		Flags: func(fs *flag.FlagSet) func(ctx context.Context, args []string) error {
			dir := fs.String("dir", "", "the folder for pid files")
			name := fs.String("name", "", "the service name")
			return func(ctx context.Context, args []string) error {
				if *dir == "" || *name == "" || len(args) == 0 {
					return cli.Usagef("--dir, --name and a command are required")
				}
				return supervise.RunSupervisor(ctx, *dir, *name, args)
			}
		},
	})
}

func runFirstboot(ctx context.Context, o runOptions) error {
	switch o.mode {
	case "host", "kind":
	case "appliance":
		if o.bundle == "" {
			o.bundle = liveBundle
		}
	default:
		return cli.Usagef("--mode %q: use appliance, host or kind", o.mode)
	}
	if o.bundle == "" {
		return cli.Usagef("--bundle is required in %s mode", o.mode)
	}
	if !filepath.IsAbs(o.data) {
		return cli.Usagef("--data %q must be an absolute path", o.data)
	}
	log := logctx.From(ctx)
	p := defaultPaths(o.data)
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this program: %w", err)
	}
	notifier := status.NewNotifier(ctx)
	var progress pipeline.Observer = notifier
	if o.mode == "appliance" {
		progress = pipeline.Multi(notifier, &status.Console{Path: status.DefaultIssuePath, Log: log})
		// The state file lives on the data disk: mount it (if it is
		// there already) before the runner reads the state.
		d := diskOptions(o, p)
		if dev, found, err := datadisk.Attach(ctx, d); err != nil {
			log.Warn("mounting the data disk", "device", dev, "err", err)
		} else if found {
			log.Info("found the data disk", "device", dev)
		}
	}
	if hook := testHook(ctx); hook != nil {
		progress = pipeline.Multi(progress, hook)
	}
	if o.mode != "appliance" {
		// Reset removes the data folder only when it carries this mark.
		// (On the stick the data disk is ours by its label.)
		if err := markOurs(o.data); err != nil {
			return fmt.Errorf("data folder %s: %w", o.data, err)
		}
	}
	n := discover(ctx, o, p, supervise.New(p.services(), []string{self, "supervise"}))
	steps := hostSteps(n)
	if o.mode == "kind" {
		steps = kindSteps(n)
	}
	r := &pipeline.Runner{Dir: p.State, LockFile: p.lock(), Steps: steps, Observer: progress}
	start := time.Now()
	if err := r.Run(ctx); err != nil {
		return err
	}
	notifier.Ready("ready")
	log.Info(fmt.Sprintf("firstboot: done in %s", time.Since(start).Round(100*time.Millisecond)))
	return nil
}
