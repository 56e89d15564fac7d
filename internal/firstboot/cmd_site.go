package firstboot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	flag "github.com/spf13/pflag"

	bpa "github.com/bootstick/bootstick/internal/bpa/v1alpha1"
	"github.com/bootstick/bootstick/internal/cli"
	"github.com/bootstick/bootstick/internal/hoststate"
	"github.com/bootstick/bootstick/internal/kube"
	"github.com/bootstick/bootstick/internal/logctx"
	"github.com/bootstick/bootstick/internal/pipeline"
	"github.com/bootstick/bootstick/internal/site"
	"github.com/bootstick/bootstick/internal/sitestep"
	"github.com/bootstick/bootstick/internal/sitestore"
)

// siteGroup is the group of day-2 commands on the site.
const siteGroup = "site"

// siteApplyOptions are site apply's inputs.
type siteApplyOptions struct {
	site         string
	bundle       string
	kubeconfig   string
	ageIdentity  string
	registryAddr string
	noWait       bool
	// noOperator is how long to wait for the baremetal-operator to give a
	// host a state, as the site step does.
	noOperator time.Duration
}

func init() {
	register(cli.Command{
		Name:  siteGroup + " apply",
		Usage: "site apply --site FILE [--no-wait] [--bundle DIR] [--data DIR] [--age-identity FILE] [--kubeconfig FILE] [--registry ADDR]",
		Short: "apply a changed site to the running appliance: add its new hosts, remove those it no longer names, keep it for later runs",
		Flags: func(fs *flag.FlagSet) func(ctx context.Context, args []string) error {
			var o siteApplyOptions
			fs.StringVar(&o.site, "site", "", "the site file (required; or give it as the argument)")
			fs.StringVar(&o.bundle, "bundle", liveBundle, "the bundle firstboot run used: a folder, or a stick's ISO file")
			data := fs.String("data", defaultData, "where persistent state lives (the data disk's mount point), as for firstboot run")
			fs.StringVar(&o.kubeconfig, "kubeconfig", "", "this machine's cluster (default: kubeadm's admin.conf, or kind mode's on the data folder)")
			fs.StringVar(&o.ageIdentity, "age-identity", "", "age identity file for encrypted passwords (default: age/identity.txt on the data disk, when there)")
			fs.StringVar(&o.registryAddr, "registry", "127.0.0.1:5000", "the bundle registry's loopback listen address, as given to firstboot run")
			fs.BoolVar(&o.noWait, "no-wait", false, "apply and prune, then return without following the hosts (hosts held by bootstrap.provisioningLimit then stay held until site apply runs again)")
			return func(ctx context.Context, args []string) error {
				switch {
				case len(args) == 1 && o.site == "":
					o.site = args[0]
				case len(args) > 0:
					return cli.Usagef("unexpected arguments: %s", strings.Join(args, " "))
				case o.site == "":
					return cli.Usagef("--site is required")
				}
				if !filepath.IsAbs(*data) {
					return cli.Usagef("--data %q must be an absolute path", *data)
				}
				o.noOperator = 5 * time.Minute
				return applySite(ctx, o, defaultPaths(*data), siteOut)
			}
		},
	})
}

// applySite applies the site o.site to the running appliance whose state
// is under p: it checks the site as the site step does, and against what
// the appliance runs, before it changes anything; then keeps it on the
// data disk (later runs use it), applies it through the site step's own
// Apply (new hosts get host keys; the SSH key pair stays; the provisioning
// limit paces new hosts), prunes the hosts it no longer names, records
// the hosts for status, and follows them unless o.noWait. What changed
// goes to out, by host name; no secret goes to out, the log or an error.
func applySite(ctx context.Context, o siteApplyOptions, p paths, out io.Writer) error {
	log := logctx.From(ctx)
	t, err := checkSite(ctx, o, p)
	if err != nil {
		return err
	}
	// One change at a time: not while firstboot run (its site step) or
	// another site apply works.
	if err := os.MkdirAll(filepath.Dir(p.lock()), 0o755); err != nil {
		return fmt.Errorf("taking firstboot's lock: %w", err)
	}
	lock, err := pipeline.AcquireLock(p.lock())
	if err != nil {
		return err
	}
	defer lock.Release()
	if err := checkRunningSite(ctx, t, p); err != nil {
		return err
	}
	kubeconfig := o.kubeconfig
	if kubeconfig == "" {
		kubeconfig = adminConf
		if fileExists(p.kindKubeconfig()) {
			kubeconfig = p.kindKubeconfig()
		}
	}
	c, err := kube.Load(kubeconfig)
	if err != nil {
		return err
	}
	if err := sitestep.CheckCluster(ctx, c, t.site, o.site); err != nil {
		return err
	}
	before, err := hoststate.List(ctx, c)
	if err != nil {
		return fmt.Errorf("reading the hosts: %w", err)
	}
	nodes, err := hoststate.ClusterHosts(ctx, c)
	if err != nil {
		return fmt.Errorf("reading the application cluster's hosts: %w", err)
	}

	// Keep it first: once anything is applied, a later run must use it.
	kept, err := sitestore.Save(p.siteStore(), o.site, t.files)
	if err != nil {
		return err
	}
	log.Info("kept the site on the data disk: later firstboot runs use it", "site", kept, "from", o.site)
	const again = "(the site is kept as this appliance's: run firstboot site apply again to finish)"
	t.opts.Site = kept
	// DHCP answers the new hosts before they boot, and the removed ones
	// until they are gone.
	if err := sitestep.WriteDHCPHosts(ctx, c, p.dhcpHosts(), t.early); err != nil {
		return fmt.Errorf("%w %s", err, again)
	}
	hosts, pacer, err := sitestep.Apply(ctx, c, t.opts)
	if err != nil {
		return fmt.Errorf("%w %s", err, again)
	}
	if err := sitestep.WriteHosts(p.hostsFile(), hosts); err != nil {
		return fmt.Errorf("%w %s", err, again)
	}
	names := make([]string, len(hosts))
	for i, h := range hosts {
		names[i] = h.Name
	}
	removed, err := sitestep.Prune(ctx, c, t.site.Cluster.Name, names)
	if err != nil {
		return fmt.Errorf("%w %s", err, again)
	}
	// A removed host that never registered is gone already.
	if err := sitestep.WriteDHCPHosts(ctx, c, p.dhcpHosts(), t.early); err != nil {
		return fmt.Errorf("%w %s", err, again)
	}
	fmt.Fprintf(out, "site %s applied: cluster %s, %d hosts (kept as %s)\n", o.site, t.site.Cluster.Name, len(names), kept)
	deleting := printChanges(out, names, before, removed, nodes, pacer.Held())
	if o.noWait {
		if len(pacer.Held()) > 0 {
			fmt.Fprintf(out, "--no-wait: the waiting hosts stay held until firstboot site apply runs again without --no-wait\n")
		}
		fmt.Fprintf(out, "firstboot status follows the hosts\n")
		return nil
	}

	states, err := sitestep.Follow(ctx, c, sitestep.FollowOptions{
		NoOperator: o.noOperator, ErrorSettle: hostErrorSettle, Registering: sitestep.RegisteringLimit, Pacer: pacer,
		Hosts: names, Removed: deleting,
		Progress: func(count string) { fmt.Fprintln(out, count) },
		OnError:  recordHostError(ctx, p.hostsFile(), hosts),
	})
	if err != nil {
		return err
	}
	// The Secrets of the hosts deprovisioned meanwhile, and their lines of
	// the DHCP host list.
	removed, err = sitestep.Prune(ctx, c, t.site.Cluster.Name, names)
	if err != nil {
		return err
	}
	if err := sitestep.WriteDHCPHosts(ctx, c, p.dhcpHosts(), t.early); err != nil {
		return err
	}
	for _, r := range removed {
		switch {
		case r.Deleting:
			fmt.Fprintf(out, "%s: still being deleted; firstboot site apply deletes its Secrets once it is gone\n", r.Host)
		case slices.Contains(deleting, r.Host):
			fmt.Fprintf(out, "%s: deprovisioned and gone, with its Secrets\n", r.Host)
		}
	}
	states = slices.DeleteFunc(states, func(h hoststate.Host) bool { return !slices.Contains(names, h.Name) })
	fmt.Fprintln(out, reportHosts(ctx, states))
	return nil
}

// checkedSite is a site that passed site apply's offline checks.
type checkedSite struct {
	site      *site.Site
	early     *site.Early // the same site, as the metal3 step reads it
	opts      sitestep.Options
	files     []string // the files it names, beside it
	bundleDir string
}

// checkSite checks, changing nothing, that this machine runs firstboot
// and that o.site passes the site step's checks with its bundle (OS
// images, plugins, the age identity, the baremetal-operator's admission
// rules) and names no file outside its folder.
func checkSite(ctx context.Context, o siteApplyOptions, p paths) (*checkedSite, error) {
	if _, err := os.Stat(pipeline.StatePath(p.State)); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("no firstboot state in %s: site apply changes a running appliance (give --data as to firstboot run)", p.State)
	} else if err != nil {
		return nil, fmt.Errorf("reading firstboot's state: %w", err)
	}
	dir, err := bundleDir(ctx, o.bundle, p)
	if err != nil {
		return nil, err
	}
	images, err := bundledImages(dir)
	if err != nil {
		return nil, err
	}
	n := &node{opts: runOptions{registryAddr: o.registryAddr}, paths: p, bundle: bundleInfo{dir: dir}}
	if fileExists(filepath.Join(dir, "bundle.lock")) {
		// The install configuration names the bundle's registries and
		// images, as the site step's does.
		if n.bundle, err = openBundle(dir); err != nil {
			return nil, err
		}
	}
	t := &checkedSite{bundleDir: dir, opts: sitestep.Options{Site: o.site, Images: images, KeyDir: p.sshKeyDir(), AgeIdentity: o.ageIdentity}}
	if t.opts.AgeIdentity == "" {
		t.opts.AgeIdentity = p.ageIdentity()
	}
	t.early, err = site.ReadEarly(o.site)
	if err == nil {
		t.opts.Install, err = installConfig(n, t.early.Bootstrap.Provisioning.Address)
	}
	if err != nil {
		// The full check names every problem with its line.
		if _, cerr := sitestep.Check(t.opts); cerr != nil {
			return nil, cerr
		}
		return nil, err
	}
	if t.site, err = sitestep.Check(t.opts); err != nil {
		return nil, err
	}
	for _, f := range t.site.Files() {
		if !sitestore.Beside(f.Path) {
			return nil, fmt.Errorf("site %s: %s: %s is not in the site's folder: site apply keeps the site on the data disk with the files it names; move the file beside the site", o.site, f.Field, f.Path)
		}
		t.files = append(t.files, f.Path)
	}
	return t, nil
}

// checkRunningSite refuses a site that changes what the running one set
// for good (site.FixedChanges): this machine's own settings, the
// application cluster's name and ranges.
func checkRunningSite(ctx context.Context, t *checkedSite, p paths) error {
	running, err := runningSite(p, t.bundleDir)
	if err != nil {
		return err
	}
	if running == "" {
		logctx.From(ctx).Warn("no site known that this appliance runs (none kept, none in the bundle): bootstrap and cluster settings not compared")
		return nil
	}
	re, err := site.ReadEarly(running)
	if err != nil {
		return fmt.Errorf("reading the running site: %w", err)
	}
	if problems := site.FixedChanges(re, t.site); len(problems) > 0 {
		return fmt.Errorf("site %s:\n%s", t.opts.Site, strings.Join(problems, "\n"))
	}
	return nil
}

// printChanges writes which of the site's hosts (names) are new and which
// were there (before), which were removed and what happens to them, and
// which wait for a slot (held). It returns the removed hosts still being
// deprovisioned.
func printChanges(out io.Writer, names []string, before []hoststate.Host, removed []sitestep.Removal, nodes map[string]bpa.HostStatus, held []string) []string {
	had := map[string]bool{}
	for _, h := range before {
		had[h.Name] = true
	}
	var added, stayed []string
	for _, name := range names {
		if had[name] {
			stayed = append(stayed, name)
		} else {
			added = append(added, name)
		}
	}
	fmt.Fprintf(out, "added:   %s\n", list(added))
	fmt.Fprintf(out, "kept:    %s\n", list(stayed))
	if len(removed) == 0 {
		fmt.Fprintf(out, "removed: none\n")
	}
	var deleting []string
	for _, r := range removed {
		line := "removed: " + r.Host
		switch {
		case r.PausedBy != "":
			line += fmt.Sprintf(" (paused by someone else (%s): the baremetal-operator deprovisions and deletes it once that pause is lifted)", r.PausedBy)
		case r.Deleting:
			line += " (the baremetal-operator deprovisions it; its Secrets go once it is gone)"
		}
		if nd, ok := nodes[r.Host]; ok && sitestep.IsNode(nd) {
			line += "; it is a node of the application cluster: the BPA drains it, removes its etcd member (a master) and deletes its Node (the Provisioning's NodesRemoved condition and Events follow it)"
		}
		fmt.Fprintln(out, line)
		if r.Deleting {
			deleting = append(deleting, r.Host)
		}
	}
	if len(held) > 0 {
		fmt.Fprintf(out, "waiting: %s (bootstrap.provisioningLimit: they start as hosts at work are done)\n", list(held))
	}
	return deleting
}

// runningSite is the site this appliance runs as a run would choose it
// without --site: the kept one, else the bundle's; "" when neither.
func runningSite(p paths, bundleDir string) (string, error) {
	kept, err := sitestore.Path(p.siteStore())
	if err != nil || kept != "" {
		return kept, err
	}
	return bundleSite(bundleDir), nil
}

// list is names for people: "a, b", or "none".
func list(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
