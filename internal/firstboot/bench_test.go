package firstboot

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bootstick/bootstick/internal/benchtable"
	"github.com/bootstick/bootstick/internal/command"
	"github.com/bootstick/bootstick/internal/kube"
	"github.com/bootstick/bootstick/internal/pipeline"
)

// BenchmarkHostModeVsKubeadm brings this machine up twice, back to back,
// from an empty host to a Ready node whose every pod runs and is ready:
// once with `firstboot run --mode host` (every step: the bundle, the
// registry, containerd, kubelet, kubeadm, the CNI, the manifests with the
// BPA, the done checks), once with bare kubeadm as a person would drive it
// on the same machine: the same kubeadm configuration, binaries, images
// (through the same registry) and containerd, then the same CNI file and
// untaint, then the same waits. Only the registry and containerd of the
// bare run are started by firstboot (killed as kubeadm-init starts), out
// of the timing.
func BenchmarkHostModeVsKubeadm(b *testing.B) {
	tc := toolchainDir(b)
	h := newHostRun(b, tc)
	p := defaultPaths(h.data)
	ctx := context.Background()
	reset := func() {
		if out, err := h.cmd("reset", "--data", h.data).CombinedOutput(); err != nil {
			b.Fatalf("reset: %v\n%s", err, out)
		}
	}
	b.ResetTimer()

	// firstboot, from an empty host.
	start := time.Now()
	if out, err := h.run().CombinedOutput(); err != nil {
		b.Fatalf("firstboot run: %v\n%s", err, command.Tail(string(out), 30))
	}
	tFirstboot := time.Since(start)
	c, err := kube.Load(adminConf)
	if err != nil {
		b.Fatal(err)
	}
	if notReady, err := c.PodsNotReady(ctx, ""); err != nil || len(notReady) > 0 {
		b.Fatalf("after firstboot: pods not ready: %v %v", notReady, err)
	}
	// What the bare run reuses: firstboot's kubeadm configuration (and the
	// Secret encryption file it names) and its CNI file.
	saved := map[string][]byte{}
	for _, f := range []string{p.kubeadmConfig(), p.encryptionConfig(), filepath.Join(p.cniConfDir(), "10-bootstick.conflist")} {
		data, err := os.ReadFile(f)
		if err != nil {
			b.Fatal(err)
		}
		saved[f] = data
	}
	b.StopTimer()
	reset()

	// Bare kubeadm: firstboot serves the registry and runs containerd,
	// and is killed as kubeadm-init starts.
	run := h.run()
	run.Env = append(run.Env, "BOOTSTICK_TEST_PAUSE_STEP=kubeadm-init")
	var out strings.Builder
	run.Stdout, run.Stderr = &out, &out
	if err := run.Start(); err != nil {
		b.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- run.Wait() }()
	for {
		st, err := pipeline.LoadState(pipeline.StatePath(p.State))
		if err == nil {
			if r := st.Step("kubeadm-init"); r != nil && r.State == pipeline.StateRunning {
				break
			}
		}
		select {
		case err := <-exited:
			b.Fatalf("firstboot exited before kubeadm-init: %v\n%s", err, out.String())
		case <-time.After(50 * time.Millisecond): // polling the state file for the step
		}
	}
	run.Process.Signal(syscall.SIGKILL)
	<-exited
	for f, data := range saved {
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(f, data, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	cni := filepath.Join(p.cniConfDir(), "10-bootstick.conflist")
	os.Remove(cni) // written after init, as a person would
	kubeadmBin := filepath.Join(tc, "bin", "kubeadm")
	klogPath := filepath.Join(b.TempDir(), "kubelet.log")
	kubeadmRun := func(args ...string) {
		cmd := exec.Command(kubeadmBin, args...)
		cmd.Env = append(os.Environ(), "PATH="+filepath.Join(tc, "bin")+":"+os.Getenv("PATH"))
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("kubeadm %s: %v\n%s\nkubelet:\n%s", strings.Join(args, " "), err, command.Tail(string(out), 20), command.Tail(readText(klogPath), 20))
		}
	}
	stopKubelet := func() {}
	defer func() {
		stopKubelet()
		reset()
	}()
	b.StartTimer()
	start = time.Now()
	cfg := "--config=" + p.kubeadmConfig()
	kubeadmRun("init", "phase", "preflight", cfg, "--ignore-preflight-errors=SystemVerification,Swap")
	kubeadmRun("init", "phase", "kubelet-start", cfg)
	// No systemd here: kubelet runs as kubeadm's drop-in would run it.
	flags, err := kubeletFlags(kubeletFlagsFile)
	if err != nil {
		b.Fatal(err)
	}
	klog, err := os.Create(klogPath)
	if err != nil {
		b.Fatal(err)
	}
	defer klog.Close()
	stopKubelet = runKubelet(filepath.Join(tc, "bin", "kubelet"), append([]string{
		"--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf", "--kubeconfig=" + kubeletKubeconfig,
		"--config=/var/lib/kubelet/config.yaml"}, flags...), klog)
	kubeadmRun("init", cfg, "--skip-phases=preflight,kubelet-start", "--skip-token-print")
	if err := os.WriteFile(cni, saved[cni], 0o644); err != nil {
		b.Fatal(err)
	}
	if c, err = kube.Load(adminConf); err != nil {
		b.Fatal(err)
	}
	if err := c.Untaint(ctx); err != nil {
		b.Fatal(err)
	}
	wait := 10 * time.Minute
	if err := c.WaitNodesReady(ctx, wait); err != nil {
		b.Fatal(err)
	}
	if err := c.WaitDaemonSet(ctx, "kube-system", "kube-proxy", wait); err != nil {
		b.Fatal(err)
	}
	if err := c.WaitDeployment(ctx, "kube-system", "coredns", wait); err != nil {
		b.Fatal(err)
	}
	if err := c.WaitPodsReady(ctx, "", wait); err != nil {
		b.Fatal(err)
	}
	tKubeadm := time.Since(start)
	b.StopTimer()
	g, met := benchtable.Goal(tFirstboot.Seconds()/tKubeadm.Seconds(), "lower", 1.5)
	benchtable.Record(b, benchtable.Row{Group: "bring-up", Name: "firstboot vs bare kubeadm",
		Ours: benchtable.Side{Name: "firstboot --mode host", Value: tFirstboot.Seconds(), Unit: "s"},
		Ref:  benchtable.Side{Name: "kubeadm init", Value: tKubeadm.Seconds(), Unit: "s"},
		Goal: g, Met: met, Better: "lower",
		What: fmt.Sprintf("this host, empty, to a Ready node with every pod running and ready, back to back, one run each: firstboot's whole run (bundle, registry, containerd, kubelet, kubeadm, CNI, untaint, the manifests with the BPA, the done waits) against kubeadm preflight, kubelet-start, kubelet, init with firstboot's configuration, the same CNI file, untaint and the same waits, with the same binaries, images (pulled through the same registry) and containerd")})
}

// runKubelet keeps kubelet running as kubeadm's systemd unit would
// (Restart=always): kubelet exits until kubeadm init has written its
// kubeconfig. The returned func stops it.
func runKubelet(bin string, args []string, log io.Writer) func() {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			cmd := exec.Command(bin, args...)
			cmd.Stdout, cmd.Stderr = log, log
			if err := cmd.Start(); err == nil {
				exited := make(chan struct{})
				go func() { cmd.Wait(); close(exited) }()
				select {
				case <-stop:
					cmd.Process.Kill()
					<-exited
					return
				case <-exited:
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Second): // the unit's RestartSec
			}
		}
	}()
	return func() { close(stop); <-done }
}
