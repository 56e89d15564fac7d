package firstboot

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	flag "github.com/spf13/pflag"

	"github.com/bootstick/bootstick/internal/logctx"

	"github.com/bootstick/bootstick/internal/mounts"

	"github.com/bootstick/bootstick/internal/command"

	"github.com/bootstick/bootstick/internal/cli"
	"github.com/bootstick/bootstick/internal/containerd"
	"github.com/bootstick/bootstick/internal/firewall"
	"github.com/bootstick/bootstick/internal/pipeline"
	"github.com/bootstick/bootstick/internal/status"
	"github.com/bootstick/bootstick/internal/supervise"
)

func init() {
	register(cli.Command{
		Name:  "reset",
		Usage: "reset [--data DIR] [--bin-dir DIR]",
		Short: "undo a host-mode install: our processes, mounts, CNI interface, iptables rules and folders",
		Flags: func(fs *flag.FlagSet) func(ctx context.Context, args []string) error {
			data := fs.String("data", defaultData, "where persistent state lives")
			binDir := fs.String("bin-dir", "", "where kubeadm is (default: as for run)")
			return func(ctx context.Context, args []string) error {
				if err := cli.NoArgs(args); err != nil {
					return err
				}
				if supervise.SystemdIsPID1() && isLiveSystem() {
					return errors.New("this is the appliance itself; reset is for host mode")
				}
				return resetHost(ctx, defaultPaths(*data), *binDir)
			}
		},
	})
}

func isLiveSystem() bool {
	_, err := os.Stat("/run/live/medium")
	return err == nil
}

// resetHost undoes what a host-mode run did. It keeps going past failures
// and reports them all at the end.
func resetHost(ctx context.Context, p paths, binDir string) error {
	log := logctx.From(ctx)
	if err := checkOurs(p.Data); err != nil {
		return err
	}
	// Refuse while a run is in progress.
	if err := os.MkdirAll(p.Run, 0o755); err != nil {
		return err
	}
	lock, err := pipeline.AcquireLock(p.lock())
	if err != nil {
		return err
	}
	defer lock.Release()

	self, _ := os.Executable()
	services := supervise.New(p.services(), []string{self, "supervise"})
	n := &node{opts: runOptions{binDir: binDir}, paths: p}
	var errs []error
	note := func(what string, err error) {
		if err != nil {
			log.Warn("reset: "+what, "err", err)
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
		}
	}

	note("stopping kubelet", services.Stop(ctx, kubeletService))
	sock := p.containerd().Address
	if kubeadmBin, err := n.findBin("kubeadm"); err == nil && containerd.WaitReady(ctx, sock, time.Second) == nil {
		_, err := command.Run(ctx, command.Options{Env: n.toolEnv()}, kubeadmBin, "reset", "--force", "--cri-socket=unix://"+sock)
		note("kubeadm reset", err)
	}
	note("stopping containerd", services.Stop(ctx, containerd.ServiceName))
	killShims(sock, log)
	note("stopping pods", killCgroups("kubepods"))
	note("stopping the registry", services.Stop(ctx, registryService))
	note("stopping the site's clock", services.Stop(ctx, clockService))

	note("unmounting", unmountUnder(p.Data, p.Run, "/var/lib/kubelet", p.containerd().State))
	if _, err := os.Stat("/sys/class/net/" + cniBridge); err == nil {
		_, err := command.Run(ctx, command.Options{}, "ip", "link", "delete", cniBridge)
		note("deleting "+cniBridge, err)
	}
	for _, tool := range []string{"iptables", "ip6tables"} {
		note("removing "+tool+" rules", dropRules(ctx, tool))
	}
	if nft, err := firewall.Find(); err == nil {
		note("removing the firewall", firewall.Remove(ctx, nft))
	}
	for _, dir := range []string{p.Data, p.Run, p.Etc, "/etc/kubernetes", "/var/lib/kubelet",
		"/var/lib/cni/networks/bootstick", status.DefaultIssuePath} {
		if dir == p.State {
			continue
		}
		note("removing "+dir, removeAllBut(dir, p.State))
	}
	if matches, _ := filepath.Glob("/var/lib/cni/results/bootstick-*"); len(matches) > 0 {
		for _, m := range matches {
			os.Remove(m)
		}
	}
	lock.Release()
	note("removing "+p.State, os.RemoveAll(p.State))
	if p.Data != "" {
		os.Remove(p.Data)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	log.Info("reset: done")
	return nil
}

// removeAllBut removes path, except keep (inside it) until the end.
func removeAllBut(path, keep string) error {
	if path == keep {
		return nil
	}
	if !strings.HasPrefix(keep+"/", path+"/") {
		return os.RemoveAll(path)
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	for _, en := range entries {
		child := filepath.Join(path, en.Name())
		if err := removeAllBut(child, keep); err != nil {
			return err
		}
	}
	return nil
}

// killShims kills containerd-shim processes serving our containerd.
func killShims(sock string, log *slog.Logger) {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range procs {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		args := strings.Split(string(data), "\x00")
		if len(args) == 0 || !strings.Contains(filepath.Base(args[0]), "containerd-shim") {
			continue
		}
		if slicesContains(args, sock) {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
			log.Info("reset: killing shim", "pid", pid)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

func slicesContains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// killCgroups kills every process in the named cgroup trees (under each
// cgroup v1 controller, or the v2 root) and removes the cgroups.
func killCgroups(name string) error {
	var roots []string
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		roots = []string{filepath.Join("/sys/fs/cgroup", name)}
	} else {
		ctrls, _ := os.ReadDir("/sys/fs/cgroup")
		for _, c := range ctrls {
			roots = append(roots, filepath.Join("/sys/fs/cgroup", c.Name(), name))
		}
	}
	var errs []error
	for _, root := range roots {
		if _, err := os.Stat(root); err != nil {
			continue
		}
		var dirs []string
		filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for range 50 {
			killed := 0
			for _, d := range dirs {
				data, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
				for _, f := range strings.Fields(string(data)) {
					if pid, err := strconv.Atoi(f); err == nil {
						syscall.Kill(pid, syscall.SIGKILL)
						killed++
					}
				}
			}
			if killed == 0 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) }) // deepest first
		for _, d := range dirs {
			if err := syscall.Rmdir(d); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("removing cgroup %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// unmountUnder unmounts every mount point at or below the given folders,
// deepest first.
func unmountUnder(dirs ...string) error {
	points, err := mounts.Under(dirs...)
	if err != nil {
		return err
	}
	var errs []error
	for _, mp := range points {
		if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", mp, err))
		}
	}
	return errors.Join(errs...)
}

// dropRules removes every iptables rule and chain of kube-proxy (KUBE-*)
// and of the CNI plugins (CNI-*).
func dropRules(ctx context.Context, tool string) error {
	save, err := exec.LookPath(tool + "-save")
	if err != nil {
		return nil // no iptables on this host: nothing of ours either
	}
	out, err := command.Output(ctx, command.Options{}, save)
	if err != nil {
		return err
	}
	var kept bytes.Buffer
	dropped := 0
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "KUBE-") || strings.Contains(line, "CNI-") {
			dropped++
			continue
		}
		kept.WriteString(line + "\n")
	}
	if dropped == 0 {
		return nil
	}
	_, err = command.Run(ctx, command.Options{Stdin: &kept}, tool+"-restore")
	return err
}
