package firstboot

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/command"
	"github.com/bootstick/bootstick/internal/kube"
	"github.com/bootstick/bootstick/internal/qemu"
	"github.com/bootstick/bootstick/internal/render"
	"github.com/bootstick/bootstick/internal/status"
	"github.com/bootstick/bootstick/internal/virtbmc"
)

// The provisioning network of the Metal3 test: this machine's end of a
// veth pair whose other end lives in a network namespace the test makes.
const (
	m3Netns     = "bootstick-test-prov"
	m3Iface     = "bsprov0"
	m3Peer      = "bsprov0p"
	m3Address   = "172.22.0.1"
	m3BootMAC   = "52:54:00:b0:07:10"
	m3BMCPort   = 16230
	m3WatchTime = 10 * time.Minute
)

// TestHostMetal3 brings this machine up in host mode with a site: Ironic
// and the baremetal-operator from the toolchain's images, configured from
// the site. A BareMetalHost behind a BMC that answers IPMI (ipmi_sim)
// registers (BMO creates its HostFirmwareComponents, the path of the v0.6.0
// crash) and reaches inspecting; the deploy ramdisk, booted in QEMU with
// the host's MAC, looks itself up in Ironic. Ironic offers API 1.83, below the
// firmware API (1.86) whose path crashes BMO v0.6.0, and for ten minutes
// after the host is created neither Ironic nor BMO restarts. No password
// reaches firstboot's output, its state or its status.
func TestHostMetal3(t *testing.T) {
	if testing.Short() {
		t.Skip("brings up a real node with Ironic and the baremetal-operator on this host, and boots the deploy ramdisk in QEMU (root, make toolchain)")
	}
	tc := toolchainDir(t)
	files := filepath.Join(filepath.Dir(filepath.Join(tc, "oci")), "files")
	for _, f := range []string{"ironic-python-agent.kernel", "ironic-python-agent.initramfs", "debian-13-compute.qcow2"} {
		if _, err := os.Stat(filepath.Join(files, f)); err != nil {
			t.Fatalf("%v: run make toolchain first", err)
		}
	}
	h := newHostRun(t, tc)
	provisioningNetwork(t)

	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	bmcPassword := "bmc-" + randomHex(t, 6) // ipmi_sim keeps up to 16 bytes
	bmc, err := virtbmc.StartIPMISim(ctx, t.TempDir(), "127.0.0.1", m3BMCPort, "admin", bmcPassword)
	if err != nil {
		t.Fatal(err)
	}
	defer bmc.Stop()

	sum, _, err := cas.HashFile(filepath.Join(files, "debian-13-compute.qcow2"))
	if err != nil {
		t.Fatal(err)
	}
	sitePath := filepath.Join(t.TempDir(), "site.yaml")
	site := fmt.Sprintf(`apiVersion: bootstick.dev/v1alpha1
kind: Site
bootstrap:
  provisioning:
    interface: %s
    address: %s/24
    dhcpRange: {start: 172.22.0.10, end: 172.22.0.100}
  dataDisk: /dev/disk/by-id/unused-in-host-mode
hosts:
- name: node-0
  role: master
  bmc:
    address: ipmi://127.0.0.1:%d
    credentials: {username: admin, password: %s}
  bootMACAddress: %s
  image:
    url: http://%s:%d/images/debian-13-compute.qcow2
    checksum: %s
    format: qcow2
cluster:
  name: metal3-test
`, m3Iface, m3Address, m3BMCPort, bmcPassword, m3BootMAC, m3Address, render.ImagePort, sum.Hex())
	if err := os.WriteFile(sitePath, []byte(site), 0o600); err != nil {
		t.Fatal(err)
	}

	run := h.cmd("run", "--mode", "host", "--bundle", filepath.Join(tc, "oci"), "--data", h.data, "--site", sitePath)
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("run: %v\n%s", err, command.Tail(string(out), 40))
	}
	for _, want := range []string{"Ironic's API answers", "the baremetal-operator runs"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("firstboot did not log %q", want)
		}
	}

	c, err := kube.Load(adminConf)
	if err != nil {
		t.Fatal(err)
	}
	bmh, err := c.CS.CoreV1().Secrets(render.Namespace).Get(ctx, "node-0-bmc-secret", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the host's BMC Secret: %v", err)
	}
	created := bmh.CreationTimestamp.Time

	// Ironic offers what BMO v0.6.0 needs (>= 1.81) and not the firmware
	// API (1.86): BMO never calls GetFirmwareComponents' crashing path.
	if v := ironicMaxVersion(t); v != "1.83" {
		t.Errorf("Ironic offers API %s, want 1.83 (pinned to release 22.0, below the firmware API 1.86)", v)
	}

	waitHostState(t, ctx, c, "inspecting", 8*time.Minute)
	if logs := ironicLog(t); !strings.Contains(logs, `moved to provision state "inspecting"`) {
		t.Errorf("Ironic's log does not show the node inspecting:\n%s", command.Tail(logs, 20))
	}

	// The deploy ramdisk boots (QEMU, TCG) to the point where the agent
	// looks itself up in Ironic by the host's MAC. Its only way out is
	// Ironic's API; Ironic's log shows the lookup.
	vm, err := qemu.Start(ctx, qemu.Options{
		Dir: t.TempDir(), MemoryMiB: 2560, CPUs: 1,
		Kernel: filepath.Join(files, "ironic-python-agent.kernel"), Initrd: filepath.Join(files, "ironic-python-agent.initramfs"),
		Append: "console=ttyS0,115200n8 ipa-api-url=http://10.0.2.100:6385 ipa-insecure=1",
		NICMAC: m3BootMAC, GuestForwards: []string{"10.0.2.100:6385=" + m3Address + ":6385"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Kill()
	lookup := "GET /v1/lookup?addresses=" + strings.ReplaceAll(m3BootMAC, ":", "%3A")
	if !logShows(ctx, lookup, 8*time.Minute) {
		serial, _ := os.ReadFile(vm.SerialLog)
		t.Fatalf("Ironic's log shows no %q from the deploy ramdisk:\n%s\nthe ramdisk's console:\n%s",
			lookup, command.Tail(ironicLog(t), 15), command.Tail(string(serial), 40))
	}
	t.Logf("Ironic's log: %s", lookup)
	vm.Kill()

	// Ten minutes after the host was created, Ironic and BMO have not
	// restarted once.
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for {
		for _, d := range []struct{ ns, name string }{{render.IronicNamespace, "ironic"}, {render.BMONamespace, "baremetal-operator"}} {
			w, err := c.DeploymentState(ctx, d.ns, d.name)
			if err != nil {
				t.Fatal(err)
			}
			if !w.Ready || w.Restarts != 0 {
				t.Fatalf("%s/%s %v after the host was created: ready %v, %d restarts (%s)",
					d.ns, d.name, time.Since(created).Round(time.Second), w.Ready, w.Restarts, w.Detail)
			}
		}
		if time.Since(created) >= m3WatchTime {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-tick.C:
		}
	}
	t.Logf("Ironic and BMO ran %v after the host was created with 0 restarts", time.Since(created).Round(time.Second))

	// What people read: status shows both services, and nothing holds a
	// password.
	sout, err := h.cmd("status", "--data", h.data, "--json").Output()
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	var rep status.Report
	if err := json.Unmarshal(sout, &rep); err != nil {
		t.Fatalf("status --json: %v\n%s", err, sout)
	}
	seen := map[string]string{}
	for _, s := range rep.Cluster.Services {
		seen[s.Name] = s.State
	}
	if !strings.HasPrefix(seen["Ironic"], "ready") || seen["baremetal-operator"] != "ready" {
		t.Errorf("status shows services %v, want Ironic and the baremetal-operator ready", seen)
	}
	ironicPW, err := c.CS.CoreV1().Secrets(render.BMONamespace).Get(ctx, render.IronicCredentials, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secrets := map[string]string{"the BMC password": bmcPassword, "Ironic's password": string(ironicPW.Data["password"])}
	for what, secret := range secrets {
		if len(secret) < 8 {
			t.Fatalf("%s is too short to look for", what)
		}
		for name, text := range map[string]string{"firstboot run's output": string(out), "status --json": string(sout)} {
			if strings.Contains(text, secret) {
				t.Errorf("%s holds %s", name, what)
			}
		}
		filepath.Walk(h.data, func(p string, fi os.FileInfo, err error) error {
			if err != nil || !fi.Mode().IsRegular() || fi.Size() > 8<<20 || strings.Contains(p, "/etcd/") || strings.Contains(p, "/containerd/") {
				return nil
			}
			if data, err := os.ReadFile(p); err == nil && strings.Contains(string(data), secret) {
				t.Errorf("%s holds %s", p, what)
			}
			return nil
		})
	}
}

// provisioningNetwork makes the veth pair, its far end in a namespace of
// the test's own, and removes both at the end.
func provisioningNetwork(t *testing.T) {
	t.Helper()
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	exec.Command("ip", "netns", "del", m3Netns).Run()
	exec.Command("ip", "link", "del", m3Iface).Run()
	ip("netns", "add", m3Netns)
	t.Cleanup(func() {
		exec.Command("ip", "link", "del", m3Iface).Run()
		exec.Command("ip", "netns", "del", m3Netns).Run()
	})
	ip("link", "add", m3Iface, "type", "veth", "peer", "name", m3Peer)
	ip("link", "set", m3Peer, "netns", m3Netns)
	ip("addr", "add", m3Address+"/24", "dev", m3Iface)
	ip("link", "set", m3Iface, "up")
	ip("-n", m3Netns, "link", "set", m3Peer, "up")
}

// waitHostState waits until node-0's BareMetalHost is in state.
func waitHostState(t *testing.T, ctx context.Context, c *kube.Client, state string, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	last := ""
	for {
		states, err := c.HostStates(ctx)
		if err == nil && len(states) == 1 {
			last = states[0].State + " " + states[0].Error
			if states[0].State == state {
				t.Logf("host node-0: %s", state)
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("host node-0 did not reach %s in %v (last: %s)\nIronic:\n%s\nBMO:\n%s", state, timeout, last,
				command.Tail(ironicLog(t), 25), command.Tail(podLog(t, render.BMONamespace, "deploy/baremetal-operator", ""), 25))
		case <-tick.C:
		}
	}
}

// logShows waits until Ironic's log holds want, or timeout.
func logShows(ctx context.Context, want string, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		if strings.Contains(podLog(nil, render.IronicNamespace, "deploy/ironic", "ironic"), want) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
}

// ironicMaxVersion is the newest API version Ironic offers.
func ironicMaxVersion(t *testing.T) string {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://%s:%d/", m3Address, render.IronicAPIPort))
	if err != nil {
		t.Fatalf("Ironic's API: %v", err)
	}
	defer resp.Body.Close()
	var root struct {
		DefaultVersion struct {
			Version string `json:"version"`
		} `json:"default_version"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&root); err != nil {
		t.Fatalf("Ironic's API root: %v", err)
	}
	return root.DefaultVersion.Version
}

func ironicLog(t *testing.T) string {
	return podLog(t, render.IronicNamespace, "deploy/ironic", "ironic")
}

func podLog(t *testing.T, ns, what, container string) string {
	args := []string{"--kubeconfig", adminConf, "-n", ns, "logs", what}
	if container != "" {
		args = append(args, "-c", container)
	}
	out, _ := exec.Command(filepath.Join(cas.DefaultRoot(), "toolchain", "current", "bin", "kubectl"), args...).CombinedOutput()
	return string(out)
}

func randomHex(t *testing.T, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// newHostRun takes the host-mode lock, builds firstboot, and resets the
// machine (checking nothing is left) when the test ends.
func newHostRun(t *testing.T, tc string) *hostRun {
	t.Helper()
	hostModeLock(t)
	h := &hostRun{t: t, bin: buildFirstboot(t), tc: tc, data: "/var/lib/bootstick-test"}
	t.Cleanup(func() {
		out, err := h.cmd("reset", "--data", h.data).CombinedOutput()
		if err != nil {
			t.Errorf("reset: %v\n%s", err, out)
		}
		checkNothingLeft(t, h.data)
	})
	return h
}

// hostModeLock holds the machine-wide lock of the host-mode tests: one
// host-mode node per machine.
func hostModeLock(t *testing.T) {
	t.Helper()
	lockf, err := os.OpenFile("/run/bootstick-hostmode-test.lock", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lockf.Close() }) // after the reset: cleanups run last-in first-out
	if err := syscall.Flock(int(lockf.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
}

// buildFirstboot builds firstboot (with the test-only hooks) for a test.
func buildFirstboot(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "firstboot")
	if out, err := exec.Command("go", "build", "-tags", "bootsticktest", "-o", bin, "github.com/bootstick/bootstick/cmd/firstboot").CombinedOutput(); err != nil {
		t.Fatalf("building firstboot: %v\n%s", err, out)
	}
	return bin
}
