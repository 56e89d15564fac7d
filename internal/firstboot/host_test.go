package firstboot

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bootstick/bootstick/internal/mounts"

	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/command"
	"github.com/bootstick/bootstick/internal/kubeadm"
	"github.com/bootstick/bootstick/internal/pipeline"
	"github.com/bootstick/bootstick/internal/registry"
	"github.com/bootstick/bootstick/internal/status"

	corev1 "k8s.io/api/core/v1"
	sigsyaml "sigs.k8s.io/yaml"
)

// toolchainDir is where make toolchain leaves the binaries and the OCI layout.
func toolchainDir(t testing.TB) string {
	dir := filepath.Join(cas.DefaultRoot(), "toolchain", "current")
	for _, p := range []string{"bin/kubeadm", "bin/kubelet", "bin/kubectl", "oci/index.json"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Fatalf("%v: run make toolchain first", err)
		}
	}
	return dir
}

type hostRun struct {
	t    testing.TB
	bin  string
	tc   string
	data string
	// ctx ends every firstboot command before go test's -timeout
	// (testctx), so a stuck run fails in words and the reset still runs.
	ctx context.Context
}

func (h *hostRun) cmd(args ...string) *exec.Cmd {
	return firstbootCmd(h.ctx, h.bin, args...)
}

// firstbootCmd runs firstboot until ctx ends; then it gets SIGTERM, as
// systemd would stop it, and is killed if it is not gone in 30 s.
func firstbootCmd(ctx context.Context, bin string, args ...string) *exec.Cmd {
	// PATH as a clean host has it: firstboot finds kubeadm, kubelet and
	// kubectl in the toolchain itself, and hands kubeadm kubelet's folder.
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	cmd.Env = os.Environ()
	return cmd
}

func (h *hostRun) run() *exec.Cmd {
	return h.cmd("run", "--mode", "host", "--bundle", filepath.Join(h.tc, "oci"), "--data", h.data)
}

// statusJSON runs firstboot status --json and returns the report and
// what it printed.
func (h *hostRun) statusJSON() (status.Report, []byte) {
	h.t.Helper()
	out, err := h.cmd("status", "--data", h.data, "--json").Output()
	if err != nil {
		h.t.Fatalf("status: %v", err)
	}
	var rep status.Report
	if err := json.Unmarshal(out, &rep); err != nil {
		h.t.Fatalf("status --json: %v\n%s", err, out)
	}
	return rep, out
}

func (h *hostRun) state() *pipeline.State {
	st, err := pipeline.LoadState(pipeline.StatePath(filepath.Join(h.data, "firstboot")))
	if err != nil {
		h.t.Fatal(err)
	}
	return st
}

// The root-only tier: firstboot run --mode host brings this machine up as a
// single node from the toolchain's bundle; SIGKILL inside the steps and a
// re-run resume it; a run after success is a no-op; every pod image came
// through the bundle's registry; reset leaves nothing of ours.
func TestHostMode(t *testing.T) {
	if testing.Short() {
		t.Skip("brings up a real node on this host with kubeadm (root, make toolchain, Debian containerd)")
	}
	tc := toolchainDir(t)
	// One host-mode node per machine: a second run of this test (another
	// `go test` on the same host) waits here instead of colliding.
	h := newHostRun(t, tc)

	// Kill firstboot inside every step in turn: the test-only pause holds
	// the target step just after it starts (recorded as running), even the
	// fast ones; SIGKILL lands there.
	killed := map[string]bool{}
	for _, st := range hostSteps(&node{}) {
		target := st.Name
		cmd := h.run()
		cmd.Env = append(cmd.Env, "BOOTSTICK_TEST_PAUSE_STEP="+target)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
	poll:
		for {
			select {
			case err := <-exited:
				t.Fatalf("run exited before step %s started: %v\n%s", target, err, command.Tail(out.String(), 30))
			case <-time.After(10 * time.Millisecond):
			}
			st, lerr := pipeline.LoadState(pipeline.StatePath(filepath.Join(h.data, "firstboot")))
			if lerr != nil {
				continue
			}
			if r := st.Step(target); r != nil && r.State == pipeline.StateRunning {
				cmd.Process.Signal(syscall.SIGKILL)
				<-exited
				break poll
			}
		}
		killed[target] = true
		before := h.state()
		t.Logf("killed firstboot in step %s", target)
		for _, s := range before.Steps {
			if s.State == pipeline.StateDone && s.Name != target {
				defer func(name string, attempts int) {
					if got := h.state().Step(name).Attempts; got != attempts {
						t.Errorf("step %s was repeated after the kill in %s: %d attempts, had %d", name, target, got, attempts)
					}
				}(s.Name, s.Attempts)
			}
		}
	}
	t.Logf("killed inside %d steps: %v", len(killed), killed)

	// Run to completion.
	if out, err := h.run().CombinedOutput(); err != nil {
		st, _ := buildStatus(defaultPaths(h.data))
		var b bytes.Buffer
		st.WriteText(&b)
		t.Fatalf("run: %v\n%s\n%s", err, command.Tail(string(out), 40), b.String())
	}
	rep, err := buildStatus(defaultPaths(h.data))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Phase != "done" {
		t.Fatalf("phase %s after a successful run", rep.Phase)
	}
	logTimes(t, rep)
	// The kill in kubeadm-init landed before kubeadm ran, so kubeadm ran
	// once, in the second attempt, with only the resumed-init checks
	// ignored: its preflight passed (kubelet found, no error ignored that
	// a fresh init must pass).
	if got := h.state().Step("kubeadm-init").Attempts; got != 2 {
		t.Errorf("kubeadm-init took %d attempts, want 2 (one killed before kubeadm ran, one that passed)", got)
	}

	// The appliance's own etcd and API server ride out a stall of the
	// machine's CPU as the application cluster's do: the kubelet restarts
	// them only after kubeadm.StallFailureThreshold failed liveness probes.
	for _, c := range []string{"etcd", "kube-apiserver"} {
		pod, data, err := readStaticPod(c)
		if err != nil || len(pod.Spec.Containers) == 0 || pod.Spec.Containers[0].LivenessProbe == nil ||
			pod.Spec.Containers[0].LivenessProbe.FailureThreshold != kubeadm.StallFailureThreshold {
			t.Errorf("%s's static Pod (%v) has no liveness probe that fails after %d failures:\n%s", c, err, kubeadm.StallFailureThreshold, data)
		}
	}
	// The kubelet asks the API server's and the scheduler's /readyz every
	// kubeadm.ReadinessPeriodSeconds, not every second: a TLS handshake
	// each time, on a machine whose CPU may be short.
	for _, c := range []string{"kube-apiserver", "kube-scheduler"} {
		pod, data, err := readStaticPod(c)
		if err != nil || len(pod.Spec.Containers) == 0 || pod.Spec.Containers[0].ReadinessProbe == nil ||
			pod.Spec.Containers[0].ReadinessProbe.PeriodSeconds != kubeadm.ReadinessPeriodSeconds {
			t.Errorf("%s's static Pod (%v) has no readiness probe every %d s:\n%s", c, err, kubeadm.ReadinessPeriodSeconds, data)
		}
	}

	// The API server's /livez and /readyz wait kubeadm.APIServerEtcdCheckTimeout
	// for etcd, not 2 s: a loaded etcd answers slowly, and a failing
	// /livez is what the kubelet restarts the API server on.
	if pod, data, err := readStaticPod("kube-apiserver"); err != nil || len(pod.Spec.Containers) == 0 {
		t.Errorf("kube-apiserver's static Pod (%v):\n%s", err, data)
	} else {
		for _, flag := range []string{"--etcd-healthcheck-timeout", "--etcd-readycheck-timeout"} {
			if want := flag + "=" + kubeadm.APIServerEtcdCheckTimeout.String(); !slices.Contains(pod.Spec.Containers[0].Command, want) {
				t.Errorf("kube-apiserver's static Pod has no %s:\n%s", want, data)
			}
		}
	}

	// A run after success is a no-op, quickly.
	start := time.Now()
	out, err := h.run().CombinedOutput()
	if err != nil {
		t.Fatalf("third run: %v\n%s", err, out)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("a run after success took %v, want under 2s", d)
	}
	if strings.Contains(string(out), "): done in") {
		t.Errorf("a run after success ran steps:\n%s", out)
	}

	checkPulledThroughBundle(t, tc, defaultPaths(h.data))
}

// checkPulledThroughBundle asserts that every pod of every namespace runs,
// that each container's image (the digest containerd resolved) is a
// manifest the bundle's registry served, and that containerd asked for no
// image the registry does not hold: nothing else was contacted.
func checkPulledThroughBundle(t *testing.T, tc string, p paths) {
	kubectl := filepath.Join(tc, "bin", "kubectl")
	pods, err := command.Output(context.Background(), command.Options{}, kubectl, "--kubeconfig", adminConf, "get", "pods", "-A",
		"-o", `jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name}{" "}{.status.phase}{" "}{range .status.containerStatuses[*]}{.image}{"|"}{.imageID}{" "}{end}{"\n"}{end}`)
	if err != nil {
		t.Fatalf("kubectl: %v", err)
	}
	served := servedManifests(t, p.registryLog())
	namespaces := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(pods)), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || f[1] != "Running" {
			t.Errorf("pod not running (want every pod Running): %s", line)
			continue
		}
		namespaces[strings.Split(f[0], "/")[0]] = true
		for _, c := range f[2:] {
			img, id, _ := strings.Cut(c, "|")
			_, digest, ok := strings.Cut(id, "@")
			if !ok {
				t.Errorf("pod %s: image %s has no repo digest (imageID %q)", f[0], img, id)
				continue
			}
			if !served[digest] {
				t.Errorf("pod %s: image %s (%s) was not served by the bundle's registry", f[0], img, digest)
			}
		}
	}
	for _, ns := range []string{"kube-system", "bpa-system"} {
		if !namespaces[ns] {
			t.Errorf("no running pod in namespace %s", ns)
		}
	}

	// containerd's own log: every image kubelet asked for is one the
	// registry served, and no pull went anywhere else.
	clog, err := os.ReadFile(filepath.Join("/run/bootstick/services", "bootstick-containerd.log"))
	if err != nil {
		t.Fatalf("containerd's log: %v", err)
	}
	pulls := 0
	for _, line := range strings.Split(string(clog), "\n") {
		if strings.Contains(line, "trying next host") || strings.Contains(line, "failed to resolve reference") {
			t.Errorf("containerd tried a registry other than the bundle's: %s", line)
		}
		_, rest, ok := strings.Cut(line, `PullImage \"`)
		if !ok {
			continue
		}
		ref, _, _ := strings.Cut(rest, `\"`)
		pulls++
		r, err := registry.ParseRef(ref)
		if err != nil {
			t.Errorf("containerd pulled %q: %v", ref, err)
			continue
		}
		key := r.String()
		if _, d, ok := strings.Cut(ref, "@"); ok {
			key = d
		}
		if !served[key] {
			t.Errorf("containerd pulled %s, which the bundle's registry did not serve", ref)
		}
	}
	if pulls == 0 {
		t.Errorf("containerd's log shows no PullImage at all:\n%s", command.Tail(string(clog), 20))
	}
}

// servedManifests reads the registry's access log.
func servedManifests(t *testing.T, path string) map[string]bool {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out, err := registry.ServedManifests(f)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func logTimes(t *testing.T, r status.Report) {
	var b strings.Builder
	var total float64
	for _, s := range r.Steps {
		fmt.Fprintf(&b, "  %-13s %6.1fs (%d attempts)\n", s.Name, s.DurationSeconds, s.Attempts)
		total += s.DurationSeconds
	}
	t.Logf("step times from the state file (last attempt each), total %.1fs:\n%s", total, b.String())
}

func checkNothingLeft(t testing.TB, data string) {
	for _, p := range []string{data, "/run/bootstick", "/etc/bootstick", "/etc/kubernetes", "/var/lib/kubelet"} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s is still there after reset", p)
		}
	}
	if _, err := os.Stat("/sys/class/net/" + cniBridge); err == nil {
		t.Errorf("interface %s is still there after reset", cniBridge)
	}
	left, err := mounts.Under("/var/lib/kubelet", "/run/bootstick", data)
	if err != nil {
		t.Fatal(err)
	}
	for _, mp := range left {
		t.Errorf("mount left after reset: %s", mp)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		c, _ := os.ReadFile(p)
		s := strings.ReplaceAll(string(c), "\x00", " ")
		if strings.Contains(s, "/run/bootstick") || strings.Contains(s, "/etc/kubernetes") || strings.Contains(s, data) {
			t.Errorf("process left after reset: %s %s", p, s)
		}
	}
	if out, err := exec.Command("iptables-save").Output(); err == nil && strings.Contains(string(out), "KUBE-") {
		t.Error("KUBE- iptables rules left after reset")
	}
}

// readStaticPod reads kubeadm's static Pod for component c.
func readStaticPod(c string) (corev1.Pod, []byte, error) {
	var pod corev1.Pod
	data, err := os.ReadFile(filepath.Join("/etc/kubernetes/manifests", c+".yaml"))
	if err == nil {
		err = sigsyaml.Unmarshal(data, &pod)
	}
	return pod, data, err
}
