// Package dockertest runs a docker engine of a test's own: its own data
// root, exec root, socket and containerd, inside a network namespace the
// test creates, so that its bridges, addresses and iptables rules live and
// die with the namespace. The test then drives it through Command, which
// runs a program in that namespace with DOCKER_HOST set.
package dockertest

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bootstick/bootstick/internal/command"
)

// Netns is the network namespace of the engine: one engine per machine
// (Start removes what a killed earlier run left in it).
const Netns = "bootstick-test-docker"

// Engine is a running dockerd.
type Engine struct {
	Dir  string // data root, exec root, socket and log below it
	Host string // DOCKER_HOST, unix://...
	Log  string // dockerd's log
}

// Start starts the engine and stops it when the test ends: containers
// removed, dockerd and its containerd stopped, the namespace deleted, the
// folder removed. A machine whose root lacks CAP_SYS_RESOURCE gets the
// runtime wrapper (runcwrap) as the default runtime.
func Start(t *testing.T) *Engine {
	t.Helper()
	for _, p := range []string{"dockerd", "docker", "runc", "nsenter", "ip"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Fatalf("%s: %v (run make deps: it installs docker.io)", p, err)
		}
	}
	cleanStale(t)
	// Short paths: containerd's socket lives below the exec root, and a
	// unix socket's path has a length limit.
	dir, err := os.MkdirTemp("/tmp", "bsdocker-")
	if err != nil {
		t.Fatal(err)
	}
	e := &Engine{Dir: dir, Host: "unix://" + filepath.Join(dir, "docker.sock"), Log: filepath.Join(dir, "dockerd.log")}
	if out, err := exec.Command("ip", "netns", "add", Netns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v\n%s", Netns, err, out)
	}
	if out, err := exec.Command("ip", "-n", Netns, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("ip link set lo up: %v\n%s", err, out)
	}
	conf := map[string]any{}
	if !hasCap(t, capSysResource) {
		wrap := filepath.Join(dir, "runcwrap")
		if out, err := exec.Command("go", "build", "-o", wrap, "github.com/bootstick/bootstick/internal/dockertest/runcwrap").CombinedOutput(); err != nil {
			t.Fatalf("building the runtime wrapper: %v\n%s", err, out)
		}
		conf["runtimes"] = map[string]any{"runcwrap": map[string]any{"path": wrap}}
		conf["default-runtime"] = "runcwrap"
		t.Logf("root lacks CAP_SYS_RESOURCE here: containers run through runcwrap, which drops it")
	}
	data, _ := json.Marshal(conf)
	if err := os.WriteFile(filepath.Join(dir, "daemon.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(e.Log)
	if err != nil {
		t.Fatal(err)
	}
	// nsenter, not `ip netns exec`: that one mounts a new /sys, which
	// hides the cgroup mounts dockerd needs.
	cmd := exec.Command("nsenter", "--net=/run/netns/"+Netns, "dockerd",
		"--config-file", filepath.Join(dir, "daemon.json"),
		"--data-root", filepath.Join(dir, "data"), "--exec-root", filepath.Join(dir, "exec"),
		"--pidfile", filepath.Join(dir, "docker.pid"), "--host", e.Host)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); logf.Close() }()
	t.Cleanup(func() { e.stop(t, cmd, exited) })

	// Wait until it answers (or exits).
	deadline := time.After(2 * time.Minute)
	for {
		if err := e.Command("docker", "info").Run(); err == nil {
			break
		}
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("dockerd exited: %v\n%s", err, command.Tail(readFile(e.Log), 20))
		case <-deadline:
			t.Fatalf("dockerd does not answer after 2 minutes\n%s", command.Tail(readFile(e.Log), 20))
		case <-time.After(200 * time.Millisecond):
		}
	}
	return e
}

// Command runs a program in the engine's namespace, with DOCKER_HOST set.
func (e *Engine) Command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command("nsenter", append([]string{"--net=/run/netns/" + Netns, name}, args...)...)
	cmd.Env = append(os.Environ(), "DOCKER_HOST="+e.Host)
	return cmd
}

// stop removes every container, stops dockerd (which stops its
// containerd), kills what is left in the namespace, deletes it and
// removes the folder.
func (e *Engine) stop(t *testing.T, cmd *exec.Cmd, exited chan error) {
	if out, err := e.Command("docker", "ps", "-aq").Output(); err == nil {
		if ids := strings.Fields(string(out)); len(ids) > 0 {
			if out, err := e.Command("docker", append([]string{"rm", "-f", "-v"}, ids...)...).CombinedOutput(); err != nil {
				t.Errorf("removing the engine's containers: %v\n%s", err, out)
			}
		}
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(time.Minute):
		t.Errorf("dockerd did not stop within a minute of SIGTERM; killing it")
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	}
	killNetns()
	unmountBelow(e.Dir)
	exec.Command("ip", "netns", "del", Netns).Run()
	if err := os.RemoveAll(e.Dir); err != nil {
		t.Errorf("removing %s: %v", e.Dir, err)
	}
}

// cleanStale removes what a killed earlier run left: processes in the
// namespace, the namespace, and mounts below its folders.
func cleanStale(t *testing.T) {
	if _, err := os.Stat("/run/netns/" + Netns); err != nil {
		return
	}
	t.Logf("removing the engine an earlier run left (namespace %s)", Netns)
	killNetns()
	dirs, _ := filepath.Glob("/tmp/bsdocker-*")
	for _, d := range dirs {
		unmountBelow(d)
		os.RemoveAll(d)
	}
	exec.Command("ip", "netns", "del", Netns).Run()
}

func killNetns() {
	out, _ := exec.Command("ip", "netns", "pids", Netns).Output()
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// unmountBelow unmounts every mount below dir, deepest first.
func unmountBelow(dir string) {
	data, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return
	}
	var below []string
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Fields(l)
		if len(f) > 1 && strings.HasPrefix(f[1], dir+"/") {
			below = append(below, f[1])
		}
	}
	for i := len(below) - 1; i >= 0; i-- {
		syscall.Unmount(below[i], syscall.MNT_DETACH)
	}
}

const capSysResource = 24

// hasCap reports whether this process's bounding set holds the capability.
func hasCap(t *testing.T, c uint) bool {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "CapBnd:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatalf("CapBnd %q: %v", v, err)
			}
			return n&(1<<c) != 0
		}
	}
	t.Fatal("no CapBnd in /proc/self/status")
	return false
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(bytes.ToValidUTF8(b, nil))
}
