package firstboot

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/bootstick/bootstick/internal/atomicfile"
	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/cli"
	"github.com/bootstick/bootstick/internal/containerd"
	"github.com/bootstick/bootstick/internal/datadisk"
	"github.com/bootstick/bootstick/internal/kindcluster"
	"github.com/bootstick/bootstick/internal/kubeadm"
	"github.com/bootstick/bootstick/internal/pipeline"
	"github.com/bootstick/bootstick/internal/registry"
	"github.com/bootstick/bootstick/internal/status"
	"github.com/bootstick/bootstick/internal/supervise"
)

// Service names of the long-lived processes firstboot starts.
const (
	registryService = "bootstick-registry"
	kubeletService  = "bootstick-kubelet"
)

// paths are every place firstboot writes. Host mode keeps all of them
// apart from anything else on the machine (its own containerd socket, root
// and state), so reset can remove exactly these.
type paths struct {
	Data  string // persistent: the data disk's mount point, or a folder in host mode
	Run   string // runtime state, under /run
	Etc   string // rendered configuration
	State string // firstboot's state file and lock
}

func defaultPaths(data string) paths {
	return paths{Data: data, Run: "/run/bootstick", Etc: "/etc/bootstick", State: filepath.Join(data, "firstboot")}
}

func (p paths) services() string         { return filepath.Join(p.Run, "services") }
func (p paths) lock() string             { return filepath.Join(p.Run, "firstboot.lock") }
func (p paths) containerdConfig() string { return filepath.Join(p.Etc, "containerd", "config.toml") }
func (p paths) kubeadmConfig() string    { return filepath.Join(p.Etc, "kubeadm.yaml") }
func (p paths) cniConfDir() string       { return filepath.Join(p.Etc, "cni", "net.d") }
func (p paths) encryptionConfig() string { return filepath.Join(p.Data, "encryption", "config.yaml") }
func (p paths) etcdData() string         { return filepath.Join(p.Data, "etcd") }
func (p paths) registryLog() string      { return filepath.Join(p.Data, "registry", "access.log") }
func (p paths) corruptFile() string      { return filepath.Join(p.Data, "registry", "corrupt.json") }

func (p paths) containerd() containerd.Config {
	c := containerd.HostPaths(p.Data, p.Run, p.Etc)
	c.CNIConfDir = p.cniConfDir()
	return c
}

// cniBridge is the bridge our CNI config creates; reset deletes it.
const cniBridge = "bootstick0"

// adminConf is kubeadm's fixed admin kubeconfig.
const adminConf = "/etc/kubernetes/admin.conf"

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
	kindNodeImage string // kind mode: the node image (default kindest/node:<the bundle's Kubernetes version>)
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
			fs.StringVar(&o.data, "data", "/var/lib/bootstick", "where persistent state lives (the data disk's mount point)")
			fs.StringVar(&o.binDir, "bin-dir", "", "where kubeadm and kubelet are (default: PATH, then $BOOTSTICK_CACHE/toolchain/current/bin)")
			fs.StringVar(&o.address, "address", "", "the node's address (default: the address of the default route)")
			fs.StringVar(&o.nodeName, "node-name", "", "the node's name (default: the host name)")
			fs.StringVar(&o.registryAddr, "registry", "127.0.0.1:5000", "the bundle registry's loopback listen address")
			fs.StringVar(&o.dataDisk, "data-disk", "", "appliance: the data disk (default: the site's bootstrap.dataDisk, else ours by label, else the first empty disk)")
			fs.BoolVar(&o.wipeDataDisk, "wipe-data-disk", false, "appliance: erase the named data disk even when it holds data")
			fs.StringVar(&o.ageIdentity, "age-identity", "", "age identity file for encrypted passwords (default: age/identity.txt on the data disk, when there)")
			fs.StringVar(&o.podSubnet, "pod-subnet", "10.244.0.0/16", "the pod CIDR")
			fs.StringVar(&o.svcSubnet, "service-subnet", "10.96.0.0/12", "the service CIDR")
			fs.DurationVar(&o.timeout, "wait", 10*time.Minute, "how long to wait for the node to be ready")
			fs.StringVar(&o.kindName, "kind-name", "bootstick", "kind: the kind cluster's name")
			fs.StringVar(&o.kindNodeImage, "kind-node-image", "", "kind: the node image, from the bundle or the engine, never pulled (default: kindest/node:<the bundle's Kubernetes version>)")
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
				return supervise.RunSupervisor(*dir, *name, args, slog.Default())
			}
		},
	})
}

// env is what the steps share.
type env struct {
	opts     runOptions
	paths    paths
	services supervise.Manager
	log      *slog.Logger

	// found by the steps
	bundle     string // the bundle's folder (an ISO's is mounted)
	layout     string
	images     []string
	registries []string
	hasImage   func(ref string) bool // whether the bundle's registry serves ref
	binDir     string
	engine     *kindcluster.Engine // kind mode: the container engine
}

func runFirstboot(ctx context.Context, o runOptions) error {
	switch o.mode {
	case "host":
	case "appliance":
		if o.bundle == "" {
			o.bundle = liveBundle
		}
	case "kind":
	default:
		return cli.Usagef("--mode %q: use appliance, host or kind", o.mode)
	}
	if o.bundle == "" {
		return cli.Usagef("--bundle is required in %s mode", o.mode)
	}
	if !filepath.IsAbs(o.data) {
		return cli.Usagef("--data %q must be an absolute path", o.data)
	}
	p := defaultPaths(o.data)
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this program: %w", err)
	}
	e := &env{opts: o, paths: p, log: slog.Default(),
		services: supervise.New(p.services(), []string{self, "supervise"})}

	notifier := status.NewNotifier(e.log)
	console := &status.Console{Path: status.DefaultIssuePath, Log: e.log}
	var progress pipeline.Progress = notifier
	if o.mode == "appliance" {
		progress = pipeline.Multi(notifier, console)
	}
	if o.mode == "appliance" {
		// The state file lives on the data disk: mount it (if it is
		// there already) before the runner reads the state.
		if dev, found, err := datadisk.Attach(ctx, e.diskOptions()); err != nil {
			e.log.Warn("mounting the data disk", "device", dev, "err", err)
		} else if found {
			e.log.Info("found the data disk", "device", dev)
		}
	}
	if name := os.Getenv(testPauseEnv); name != "" {
		progress = pipeline.Multi(progress, pauseIn(ctx, name, e.log))
	}
	steps := e.steps()
	if o.mode == "kind" {
		steps = e.kindSteps()
	}
	r := &pipeline.Runner{Dir: p.State, LockFile: p.lock(), Steps: steps, Log: e.log, Progress: progress}
	start := time.Now()
	if err := r.Run(ctx); err != nil {
		return err
	}
	notifier.Ready("ready")
	e.log.Info(fmt.Sprintf("firstboot: done in %s", time.Since(start).Round(100*time.Millisecond)))
	return nil
}

// testPauseEnv names a step that pauses right after it starts (its state
// recorded as running): the kill test sets it so that SIGKILL lands inside
// even the steps that take milliseconds. Only tests set it.
const testPauseEnv = "BOOTSTICK_TEST_PAUSE_STEP"

func pauseIn(ctx context.Context, name string, log *slog.Logger) pipeline.Progress {
	return pipeline.ProgressFunc(func(ev pipeline.Event) {
		if ev.Step == name && ev.Phase == pipeline.PhaseStarted {
			log.Warn("pausing for a test", "step", name, "env", testPauseEnv)
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Minute):
			}
		}
	})
}

// step is a pipeline step made of functions over env.
type step struct {
	name string
	run  func(ctx context.Context, pc *pipeline.Context) error
	done func(ctx context.Context, pc *pipeline.Context) (bool, error)
}

func (s step) Name() string                                        { return s.name }
func (s step) Run(ctx context.Context, pc *pipeline.Context) error { return s.run(ctx, pc) }
func (s doneStep) Done(ctx context.Context, pc *pipeline.Context) (bool, error) {
	return s.done(ctx, pc)
}

type doneStep struct{ step }

func (e *env) steps() []pipeline.Step {
	mk := func(s step) pipeline.Step {
		if s.done != nil {
			return doneStep{s}
		}
		return s
	}
	// Every step first finds what earlier steps found: on a resumed run,
	// they may have been skipped.
	return []pipeline.Step{
		mk(step{name: "preflight", run: e.preflight}),
		mk(step{name: "bundle", run: e.locateBundle}),
		mk(step{name: "data-disk", run: e.dataDisk}),
		mk(step{name: "registry", run: e.startRegistry, done: e.registryUp}),
		mk(step{name: "containerd", run: e.startContainerd, done: e.containerdUp}),
		mk(step{name: "kubeadm-init", run: e.kubeadmInit, done: e.apiserverReady}),
		mk(step{name: "untaint", run: e.untaint}),
		mk(step{name: "cni", run: e.cni}),
		mk(step{name: "manifests", run: e.manifests}),
		mk(step{name: "site", run: e.site}),
		mk(step{name: "done", run: e.waitReady}),
	}
}

// stepHints are shown by `firstboot status` with a step's failure.
var stepHints = map[string]string{
	"preflight":    "install what is missing (see the error), then run `firstboot run` again",
	"bundle":       "pass --bundle with the folder holding the bundle (its registry/ OCI layout), or check the boot medium",
	"registry":     "see /run/bootstick/services/bootstick-registry.log; a corrupted blob means the bundle is damaged: rebuild or re-copy it",
	"containerd":   "see /run/bootstick/services/bootstick-containerd.log",
	"kubeadm-init": "see the kubelet log /run/bootstick/services/bootstick-kubelet.log; rerunning is safe",
	"done":         "kubectl --kubeconfig /etc/kubernetes/admin.conf get pods -A shows which pods are not ready",
}

// --- steps ---

func (e *env) findBin(name string) (string, error) {
	var dirs []string
	if e.opts.binDir != "" {
		dirs = []string{e.opts.binDir}
	} else {
		dirs = filepath.SplitList(os.Getenv("PATH"))
		dirs = append(dirs, "/usr/sbin", "/usr/bin")
		dirs = append(dirs, filepath.Join(cas.DefaultRoot(), "toolchain", "current", "bin"))
	}
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found in %s", name, strings.Join(dirs, ":"))
}

func (e *env) preflight(ctx context.Context, pc *pipeline.Context) error {
	var probs []string
	if os.Geteuid() != 0 {
		probs = append(probs, "firstboot run must run as root")
	}
	var missing []string
	for _, b := range []string{"kubeadm", "kubelet", "kubectl", "containerd", "runc", "containerd-shim-runc-v2", "iptables"} {
		if _, err := e.findBin(b); err != nil {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		where := "PATH and $BOOTSTICK_CACHE/toolchain/current/bin"
		if e.opts.binDir != "" {
			where = e.opts.binDir
		}
		probs = append(probs, fmt.Sprintf("programs not found in %s: %s (Debian packages: containerd runc iptables; Kubernetes: make toolchain)",
			where, strings.Join(missing, ", ")))
	}
	missing = nil
	for _, plugin := range []string{"bridge", "host-local", "portmap", "loopback"} {
		if _, err := os.Stat(filepath.Join(e.paths.containerd().CNIBinDir, plugin)); err != nil {
			missing = append(missing, plugin)
		}
	}
	if len(missing) > 0 {
		probs = append(probs, fmt.Sprintf("CNI plugins missing from %s: %s (Debian: containernetworking-plugins)", e.paths.containerd().CNIBinDir, strings.Join(missing, ", ")))
	}
	if len(probs) > 0 {
		return errors.New(strings.Join(probs, "; "))
	}
	// Kernel settings kubeadm's preflight wants; set, not just checked.
	exec.CommandContext(ctx, "modprobe", "br_netfilter").Run()
	exec.CommandContext(ctx, "modprobe", "overlay").Run()
	for k, v := range map[string]string{"net/ipv4/ip_forward": "1", "net/bridge/bridge-nf-call-iptables": "1", "net/bridge/bridge-nf-call-ip6tables": "1"} {
		if err := os.WriteFile("/proc/sys/"+k, []byte(v), 0o644); err != nil {
			pc.Log.Warn("setting sysctl", "key", k, "err", err)
		}
	}
	return nil
}

// locateBundle finds the bundle (mounting an ISO), verifies it against its
// lock and opens its OCI layout.
func (e *env) locateBundle(ctx context.Context, pc *pipeline.Context) error {
	dir, err := e.bundleDir(ctx)
	if err != nil {
		return err
	}
	start := time.Now()
	res, err := verifyBundle(ctx, dir)
	switch {
	case errors.Is(err, errNoLock) && e.opts.mode != "appliance":
		pc.Log.Warn("the bundle has no bundle.lock: not verified", "bundle", dir)
	case errors.Is(err, errNoLock):
		return fmt.Errorf("bundle %s has no bundle.lock: it cannot be verified", dir)
	case err != nil:
		return err
	default:
		pc.Log.Info(fmt.Sprintf("verified the bundle against its lock: %d files and %d blobs, %d MB in %s",
			res.Files, res.Blobs, res.Bytes>>20, time.Since(start).Round(100*time.Millisecond)))
	}
	return e.findBundle(ctx)
}

// findBundle finds the bundle's folder and opens its OCI layout; later
// steps call it because on a resumed run the bundle step may be skipped.
func (e *env) findBundle(ctx context.Context) error {
	if e.layout != "" {
		return nil
	}
	dir, err := e.bundleDir(ctx)
	if err != nil {
		return err
	}
	e.bundle = dir
	layout := filepath.Join(dir, "registry")
	if _, err := os.Stat(filepath.Join(dir, "index.json")); err == nil {
		layout = dir // the OCI layout itself, as the toolchain makes it
	}
	e.layout = layout
	if err := e.openLayout(); err != nil {
		e.layout = ""
		return err
	}
	return nil
}

// openLayout opens e.layout and lists its images and registries.
func (e *env) openLayout() error {
	srv, err := registry.Open(e.layout, registry.Options{})
	if err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	if bad := srv.Corrupted(); len(bad) > 0 {
		return fmt.Errorf("bundle %s: corrupted manifest %s (%s)", e.layout, bad[0].Digest, bad[0].Detail)
	}
	e.images, e.registries, e.hasImage = srv.Images(), srv.Registries(), srv.Has
	if len(e.images) == 0 {
		return fmt.Errorf("bundle %s: its registry names no images (index.json annotation %s)", e.layout, registry.AnnotationImageName)
	}
	return nil
}

// findImage returns the bundle's image whose repository ends in /name.
func (e *env) findImage(name string) (registry.ImageRef, error) {
	for _, img := range e.images {
		r, err := registry.ParseRef(img)
		if err == nil && (r.Repository == name || strings.HasSuffix(r.Repository, "/"+name)) {
			return r, nil
		}
	}
	return registry.ImageRef{}, fmt.Errorf("the bundle has no %s image", name)
}

// binds are the folders kept on the data disk besides those firstboot
// places there itself (etcd, containerd): target -> folder on the disk.
var binds = map[string]string{
	"/var/lib/kubelet": "kubelet",
	"/etc/kubernetes":  "kubernetes",
	"/etc/bootstick":   "etc",
}

func (e *env) diskOptions() datadisk.Options {
	o := datadisk.Options{Mount: e.paths.Data, Binds: binds, Log: e.log, Wipe: e.opts.wipeDataDisk}
	if src := datadisk.SourceOf("/run/live/medium"); src != "" {
		o.Exclude = []string{datadisk.DiskOf(src), src}
	}
	return o
}

func (e *env) dataDisk(ctx context.Context, pc *pipeline.Context) error {
	if e.opts.mode != "appliance" {
		return os.MkdirAll(e.paths.Data, 0o755)
	}
	o := e.diskOptions()
	o.Log = pc.Log
	o.Device = e.opts.dataDisk
	if o.Device == "" {
		dev, err := e.siteDataDisk(ctx)
		if err != nil {
			return err
		}
		o.Device = dev
	}
	res, err := datadisk.Prepare(ctx, o)
	if err != nil {
		return err
	}
	if res.Formatted {
		pc.Log.Info("formatted the data disk", "device", res.Device, "label", datadisk.DefaultLabel)
	}
	e.keepHostKeys(pc.Log)
	return os.MkdirAll(e.paths.State, 0o755)
}

func (e *env) registryURL() string { return "http://" + e.opts.registryAddr }

func (e *env) startRegistry(ctx context.Context, pc *pipeline.Context) error {
	if err := e.findBundle(ctx); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(e.paths.registryLog()), 0o755); err != nil {
		return err
	}
	self, _ := os.Executable()
	err := e.services.Start(ctx, supervise.Service{
		Name: registryService, Description: "bootstick bundle registry",
		Command: []string{self, "registry", "--layout", e.layout, "--listen", strings.Join(e.registryAddrs(ctx, pc.Log), ","),
			"--access-log", e.paths.registryLog(), "--corrupt-file", e.paths.corruptFile()},
	})
	if err != nil {
		return err
	}
	return waitFor(ctx, 30*time.Second, "the registry at "+e.registryURL(), func() (bool, error) { return e.registryUp(ctx, pc) })
}

func (e *env) registryUp(ctx context.Context, pc *pipeline.Context) (bool, error) {
	if active, err := e.services.Active(ctx, registryService); err != nil || !active {
		return false, err
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.registryURL()+"/v2/", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, nil
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK && resp.Header.Get("Docker-Distribution-API-Version") != "", nil
}

func (e *env) startContainerd(ctx context.Context, pc *pipeline.Context) error {
	if err := e.findBundle(ctx); err != nil {
		return err
	}
	pause, err := e.findImage("pause")
	if err != nil {
		return err
	}
	restrict, err := containerd.NeedsRestrictOOMScoreAdj()
	if err != nil {
		return err
	}
	c := e.paths.containerd()
	c.SandboxImage = pause.String()
	c.RestrictOOMScoreAdj = restrict
	c.SystemdCgroup = supervise.SystemdIsPID1()
	hosts, err := containerd.HostsFiles(e.registries, []string{e.registryURL()})
	if err != nil {
		return err
	}
	if err := containerd.WriteFiles(e.paths.containerdConfig(), c, hosts); err != nil {
		return err
	}
	bin, err := e.findBin("containerd")
	if err != nil {
		return err
	}
	if err := e.services.Start(ctx, containerd.Service(bin, e.paths.containerdConfig())); err != nil {
		return err
	}
	return containerd.WaitReady(ctx, c.Address, 60*time.Second)
}

func (e *env) containerdUp(ctx context.Context, pc *pipeline.Context) (bool, error) {
	active, err := e.services.Active(ctx, containerd.ServiceName)
	if err != nil || !active {
		return false, err
	}
	return containerd.WaitReady(ctx, e.paths.containerd().Address, 2*time.Second) == nil, nil
}

func (e *env) kubeadmConfig(ctx context.Context) (kubeadm.Config, error) {
	if err := e.findBundle(ctx); err != nil {
		return kubeadm.Config{}, err
	}
	api, err := e.findImage("kube-apiserver")
	if err != nil {
		return kubeadm.Config{}, err
	}
	etcd, err := e.findImage("etcd")
	if err != nil {
		return kubeadm.Config{}, err
	}
	dns, err := e.findImage("coredns")
	if err != nil {
		return kubeadm.Config{}, err
	}
	addr := e.opts.address
	if addr == "" {
		if addr, err = defaultAddress(); err != nil {
			return kubeadm.Config{}, err
		}
	}
	node := e.opts.nodeName
	if node == "" {
		h, err := os.Hostname()
		if err != nil {
			return kubeadm.Config{}, fmt.Errorf("host name: %w", err)
		}
		node = strings.ToLower(h)
	}
	return kubeadm.Config{
		KubernetesVersion: api.Tag, NodeName: node, AdvertiseAddress: addr,
		PodSubnet: e.opts.podSubnet, ServiceSubnet: e.opts.svcSubnet,
		CRISocket:       "unix://" + e.paths.containerd().Address,
		ImageRepository: api.Registry, EtcdImageTag: etcd.Tag, CoreDNSImageTag: dns.Tag,
		EtcdDataDir: e.paths.etcdData(), EncryptionConfigPath: e.paths.encryptionConfig(),
		CgroupDriver: kubeadm.CgroupDriver(supervise.SystemdIsPID1()),
	}, nil
}

// defaultAddress is the source address of the default route. Connecting a
// UDP socket sends nothing.
func defaultAddress() (string, error) {
	c, err := net.Dial("udp4", "192.0.2.1:9")
	if err != nil {
		return "", fmt.Errorf("finding the node's address (no default route?): %w; pass --address", err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP.String(), nil
}

func (e *env) kubeadmInit(ctx context.Context, pc *pipeline.Context) error {
	kc, err := e.kubeadmConfig(ctx)
	if err != nil {
		return err
	}
	if created, err := kubeadm.EnsureEncryptionConfig(e.paths.encryptionConfig()); err != nil {
		return err
	} else if created {
		pc.Log.Info("generated the key that encrypts Secrets", "file", e.paths.encryptionConfig())
	}
	data, err := kubeadm.Render(kc)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(e.paths.kubeadmConfig()), 0o755); err != nil {
		return err
	}
	if err := atomicfile.Write(e.paths.kubeadmConfig(), data, 0o600); err != nil {
		return err
	}
	bin, err := e.findBin("kubeadm")
	if err != nil {
		return err
	}
	cfg := "--config=" + e.paths.kubeadmConfig()
	if pc.Record.Attempts > 1 && pc.Record.Completed.IsZero() {
		if err := e.clearTornInit(ctx, pc); err != nil {
			return err
		}
	}
	// A resumed attempt finds its own earlier work (certificates, ports in
	// use, a non-empty etcd folder); kubeadm's phases reuse it.
	ignore := "--ignore-preflight-errors=SystemVerification,Swap"
	if pc.Record.Attempts > 1 {
		ignore = "--ignore-preflight-errors=all"
	}
	if err := e.kubeadm(ctx, pc, bin, "init", "phase", "preflight", cfg, ignore); err != nil {
		return err
	}
	if err := e.kubeadm(ctx, pc, bin, "init", "phase", "kubelet-start", cfg); err != nil {
		return err
	}
	if err := e.startKubelet(ctx); err != nil {
		return err
	}
	return e.kubeadm(ctx, pc, bin, "init", cfg, "--skip-phases=preflight,kubelet-start")
}

// kubeadmOutputs are what kubeadm init writes (and a torn init's cleanup
// removes): its certificates, kubeconfigs and static pod manifests, and
// kubelet's configuration and client certificates.
var kubeadmOutputs = []string{"/etc/kubernetes", "/var/lib/kubelet/config.yaml", "/var/lib/kubelet/kubeadm-flags.env", "/var/lib/kubelet/pki"}

// clearTornInit starts kubeadm init afresh when a power cut during an
// earlier attempt left its files damaged (kubeadm does not sync them; an
// init that finished was synced before it was recorded done). Such an
// init never finished, so nothing depends on it: its files and etcd's
// data go, and kubeadm writes them again.
func (e *env) clearTornInit(ctx context.Context, pc *pipeline.Context) error {
	bad, err := kubeadm.Torn(kubeadmOutputs...)
	if err != nil || len(bad) == 0 {
		return err
	}
	pc.Log.Warn("an earlier kubeadm init was cut off and left damaged files; starting it again from scratch", "files", bad)
	if err := e.services.Stop(ctx, kubeletService); err != nil {
		return fmt.Errorf("stopping kubelet before clearing a cut-off kubeadm init: %w", err)
	}
	clear := append([]string{e.paths.etcdData()}, kubeadmOutputs...)
	for _, p := range clear {
		if err := removeContents(p); err != nil {
			return fmt.Errorf("clearing a cut-off kubeadm init: %w", err)
		}
	}
	return nil
}

// removeContents removes a file, or everything inside a folder (the
// folder itself may be a bind mount and stays).
func removeContents(p string) error {
	fi, err := os.Lstat(p)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return os.Remove(p)
	}
	entries, err := os.ReadDir(p)
	if err != nil {
		return err
	}
	for _, en := range entries {
		if err := os.RemoveAll(filepath.Join(p, en.Name())); err != nil {
			return err
		}
	}
	return nil
}

func (e *env) kubeadm(ctx context.Context, pc *pipeline.Context, bin string, args ...string) error {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.SysProcAttr = dieWithUs()
	out, err := cmd.CombinedOutput()
	pc.Log.Debug("kubeadm", "args", args, "output", string(out))
	if err != nil {
		return fmt.Errorf("kubeadm %s: %w\n%s", strings.Join(args, " "), err, tail(string(out), 20))
	}
	return nil
}

// dieWithUs makes a child process die when firstboot does (killed or
// not), so a resumed run never races an orphaned kubeadm.
func dieWithUs() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// startKubelet runs kubelet the way kubeadm's systemd drop-in would, with
// the flags kubeadm wrote to kubeadm-flags.env.
func (e *env) startKubelet(ctx context.Context) error {
	bin, err := e.findBin("kubelet")
	if err != nil {
		return err
	}
	args := []string{bin,
		"--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
		"--kubeconfig=/etc/kubernetes/kubelet.conf",
		"--config=/var/lib/kubelet/config.yaml"}
	extra, err := kubeletFlags("/var/lib/kubelet/kubeadm-flags.env")
	if err != nil {
		return err
	}
	return e.services.Start(ctx, supervise.Service{Name: kubeletService, Description: "kubelet for bootstick", Command: append(args, extra...)})
}

// kubeletFlags reads KUBELET_KUBEADM_ARGS="..." from kubeadm's env file.
func kubeletFlags(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading kubelet flags: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "KUBELET_KUBEADM_ARGS="); ok {
			return strings.Fields(strings.Trim(v, `"`)), nil
		}
	}
	return nil, sc.Err()
}

func (e *env) apiserverReady(ctx context.Context, pc *pipeline.Context) (bool, error) {
	if _, err := os.Stat(adminConf); err != nil {
		return false, nil
	}
	if active, _ := e.services.Active(ctx, kubeletService); !active {
		if err := e.startKubelet(ctx); err != nil {
			return false, nil
		}
	}
	kc, err := e.kubeadmConfig(ctx)
	if err != nil {
		return false, err
	}
	cl := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	err = waitFor(ctx, 60*time.Second, "the API server", func() (bool, error) {
		resp, err := cl.Get("https://" + net.JoinHostPort(kc.AdvertiseAddress, "6443") + "/readyz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	// A control plane recorded as initialised is never initialised again
	// because it is slow to answer (a busy or emulated machine): fail this
	// run instead, and the next run (systemd restarts firstboot) checks
	// again. Only an init that never finished is run again.
	// Completed survives a failed check, so a run after this one fails
	// still knows the init finished once.
	recordedDone := !pc.Record.Completed.IsZero()
	if err != nil {
		if recordedDone {
			return false, fmt.Errorf("the API server does not answer yet (%v); kubeadm init finished before, so it is not run again: try again when the node is less busy", err)
		}
		return false, nil
	}
	// kubeadm writes admin.conf and starts the API server long before its
	// last phases (upload-config, bootstrap token, CoreDNS, kube-proxy):
	// an API that answers is not a finished init. The addons come last.
	if _, err = e.kubectl(ctx, "get", "-n", "kube-system", "daemonset/kube-proxy", "deployment/coredns"); err != nil && recordedDone {
		return false, fmt.Errorf("kubeadm init finished before, but its addons cannot be read (%v): not running it again", err)
	}
	return err == nil, nil
}

func (e *env) kubectl(ctx context.Context, args ...string) ([]byte, error) {
	bin, err := e.findBin("kubectl")
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig=" + e.kubeconfig()}, args...)...)
	cmd.SysProcAttr = dieWithUs()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, tail(string(out), 10))
	}
	return out, nil
}

func (e *env) untaint(ctx context.Context, pc *pipeline.Context) error {
	out, err := e.kubectl(ctx, "get", "nodes", "-o", "jsonpath={.items[*].spec.taints[*].key}")
	if err != nil {
		return err
	}
	if !strings.Contains(string(out), "node-role.kubernetes.io/control-plane") {
		return nil
	}
	_, err = e.kubectl(ctx, "taint", "nodes", "--all", "node-role.kubernetes.io/control-plane-")
	return err
}

// cniConfig is a single-node bridge network over the pod CIDR.
func cniConfig(podSubnet string) []byte {
	cfg := map[string]any{
		"cniVersion": "0.4.0",
		"name":       "bootstick",
		"plugins": []any{
			map[string]any{"type": "bridge", "bridge": cniBridge, "isGateway": true, "ipMasq": true, "hairpinMode": true,
				"ipam": map[string]any{"type": "host-local", "ranges": [][]map[string]string{{{"subnet": podSubnet}}},
					"routes": []map[string]string{{"dst": "0.0.0.0/0"}}}},
			map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
		},
	}
	data, _ := json.MarshalIndent(cfg, "", "  ")
	return append(data, '\n')
}

func (e *env) cni(ctx context.Context, pc *pipeline.Context) error {
	dir := e.paths.cniConfDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(dir, "10-bootstick.conflist"), cniConfig(e.opts.podSubnet), 0o644)
}

func (e *env) waitReady(ctx context.Context, pc *pipeline.Context) error {
	t := fmt.Sprintf("--timeout=%s", e.opts.timeout)
	if _, err := e.kubectl(ctx, "wait", "--for=condition=Ready", "nodes", "--all", t); err != nil {
		return err
	}
	// The addons' pods may not exist yet: wait for their rollouts first,
	// then for every kube-system pod.
	if _, err := e.kubectl(ctx, "rollout", "status", "-n", "kube-system", "daemonset/kube-proxy", t); err != nil {
		return err
	}
	if _, err := e.kubectl(ctx, "rollout", "status", "-n", "kube-system", "deployment/coredns", t); err != nil {
		return err
	}
	_, err := e.kubectl(ctx, "wait", "--for=condition=Ready", "pods", "--all", "-n", "kube-system", t)
	return err
}

func waitFor(ctx context.Context, timeout time.Duration, what string, f func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := f()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s", what, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
