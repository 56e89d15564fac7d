//go:build e2e

package firstboot

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	bpa "github.com/bootstick/bootstick/internal/bpa/v1alpha1"
	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/command"
	"github.com/bootstick/bootstick/internal/kube"
	"github.com/bootstick/bootstick/internal/render"
	"github.com/bootstick/bootstick/internal/testctx"
	"github.com/bootstick/bootstick/internal/vsite"
)

// exampleClusterAddr is this machine's address on the example site's
// cluster network (worker-0's eno2, exampleWorker0IP): the BPA
// logs in to worker-0 there, and master-0, which has one NIC, reaches
// worker-0 through this machine, its DHCP router.
const (
	exampleClusterAddr = "10.20.0.1/24"
	exampleWorker0IP   = "10.20.0.11"
)

// TestExampleSiteDHCPTwoNICClock provisions the README's example site,
// examples/site.yaml, exactly as it is but for what only a real site has
// (make e2e). As it is, it validates against the stick. Then its BMC
// addresses become the virtual site's, its URL image's checksum the
// stick's Debian's, and its bootstrap section this machine in host mode
// (the provisioning interface and data disk; no external network, NTP or
// DNS servers, which lie outside the test's namespace). Its hosts are
// machines of its shape: every MAC, user name and inline password as the
// example gives them, UEFI through the firmware's PXE, master-0 behind
// IPMI and DHCP only, worker-0 behind Redfish with two NICs, DHCP on the
// boot NIC and its cluster address 10.20.0.11 on the second
// (clusterInterface eno2) and a hardware clock three hours ahead,
// worker-1 behind Redfish with its credentials in a file. The BPA forms
// the cluster: every node is Ready with the InternalIP the site means, a
// pod on each node reaches the pods on the others over flannel, and every
// host's clock agrees with the site's within a second.
func TestExampleSiteDHCPTwoNICClock(t *testing.T) {
	tc := toolchainDir(t)
	iso := buildStickISO(t)
	h := newHostRun(t, tc)
	ctx, cancel := testctx.New(t, 110*time.Minute)
	defer cancel()

	w1Password := "bmc-" + randomHex(t, 6)
	machines := []vsite.Machine{
		{Name: "master-0", MAC: "52:54:00:00:01:00", BMCPort: 623, BMCAddr: netip.MustParseAddr("172.22.0.3"),
			BMCUser: "admin", BMCPassword: "change-me", Firmware: vsite.FirmwareUEFI, CPUs: controlPlaneCPUs},
		{Name: "worker-0", MAC: "52:54:00:00:01:01", ExtraMACs: []string{"52:54:00:00:02:01"}, BMC: vsite.BMCRedfish,
			BMCPort: 443, BMCAddr: netip.MustParseAddr("172.22.0.4"), BMCUser: "admin", BMCPassword: "change-me-too",
			Firmware: vsite.FirmwareUEFI, ClockAhead: hostClockAhead},
		{Name: "worker-1", MAC: "52:54:00:00:01:02", BMC: vsite.BMCRedfish, BMCPort: 443, BMCAddr: netip.MustParseAddr("172.22.0.5"),
			BMCUser: "root", BMCPassword: w1Password, Firmware: vsite.FirmwareUEFI},
	}
	// The example as it is names only what this stick carries.
	if out, err := h.cmd("validate", "--site", "../../examples/site.yaml", "--bundle", iso).CombinedOutput(); err != nil {
		t.Fatalf("firstboot validate --site examples/site.yaml --bundle %s: %v\n%s", iso, err, out)
	}
	vs := startSite(t, ctx, machines)
	sitePath := exampleSite(t, vs, tc, machines, w1Password)

	// This machine's leg on the site's cluster network.
	if out, err := exec.CommandContext(ctx, "ip", "addr", "add", exampleClusterAddr, "dev", m3Iface).CombinedOutput(); err != nil {
		t.Fatalf("adding %s to %s: %v\n%s", exampleClusterAddr, m3Iface, err, out)
	}

	took, _ := h.runSite(iso, sitePath)
	t.Logf("firstboot run, to every host provisioned: %s", took)

	kubectl := filepath.Join(tc, "bin", "kubectl")
	ips := map[string]string{
		"master-0": inspectedAddress(t, ctx, kubectl, "master-0", machines[0].MAC),
		"worker-0": exampleWorker0IP,
		"worker-1": inspectedAddress(t, ctx, kubectl, "worker-1", machines[2].MAC),
	}
	t.Logf("the nodes' addresses: %v (master-0's and worker-1's from DHCP, as inspection saw them)", ips)
	names := []string{"master-0", "worker-0", "worker-1"}
	var hosts []appHost
	for _, n := range names {
		hosts = append(hosts, appHost{n, ips[n]})
	}
	p := waitClusterReady(t, ctx, kubectl, "site-a", h.data, hosts)
	for _, hs := range p.Status.Hosts {
		made := bpa.PhaseJoin
		if hs.Name == "master-0" {
			made = bpa.PhaseInit
		}
		phaseTable(t, hs, made)
	}
	_, conf := operatorKubeconfig(t, ctx, kubectl, "site-a")
	k := func(stdin string, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", conf}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	nodes, _ := k("", "get", "nodes", "-o", "wide")
	t.Logf("kubectl --kubeconfig app.conf get nodes -o wide:\n%s", nodes)
	// Both clusters' controllers ride out a slow API server.
	for _, kc := range []string{adminConf, conf} {
		if c, err := kube.Load(kc); err != nil {
			t.Errorf("%s: %v", kc, err)
		} else {
			checkLeaderElection(t, ctx, c.CS, "kube-system/kube-controller-manager", "kube-system/kube-scheduler")
		}
	}
	for _, n := range names {
		internal, err := k("", "get", "node", n, "-o", `jsonpath={.status.addresses[?(@.type=="InternalIP")].address}`)
		if err != nil || strings.TrimSpace(internal) != ips[n] {
			t.Errorf("%s's InternalIP is %q (%v), want %s", n, internal, err, ips[n])
		}
	}
	// worker-0's flanneld took eno2, the cluster interface, once it runs.
	waitFor(t, ctx, 10*time.Minute, "flanneld on worker-0 using the interface with "+exampleWorker0IP, func() (bool, string) {
		pod, err := k("", "-n", "kube-flannel", "get", "pods", "--field-selector", "spec.nodeName=worker-0", "-o", "jsonpath={.items[0].metadata.name}")
		if err != nil {
			return false, pod
		}
		flannel, err := k("", "-n", "kube-flannel", "logs", strings.TrimSpace(pod), "-c", "kube-flannel")
		return err == nil && strings.Contains(flannel, " and address "+exampleWorker0IP+"\n"), command.Tail(flannel, 20)
	})

	// A web server on each node (the stick's toolbox image: busybox's
	// httpd); each reaches the other two and reads the other pod's name.
	const image = "registry.bootstick.dev/toolbox:1.35.0"
	var pods strings.Builder
	for _, n := range names {
		fmt.Fprintf(&pods, `---
apiVersion: v1
kind: Pod
metadata: {name: web-%[1]s, namespace: default}
spec:
  nodeName: %[1]s
  tolerations: [{operator: Exists}]
  containers:
  - {name: web, image: %[2]s, args: [httpd, -f, -p, "8080", -h, /]}
`, n, image)
	}
	if out, err := k(pods.String(), "apply", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
	if out, err := k("", "wait", "--for=condition=Ready", "--timeout=20m", "pod/web-master-0", "pod/web-worker-0", "pod/web-worker-1"); err != nil {
		t.Fatalf("the pods are not Ready: %v\n%s", err, out)
	}
	podIP := map[string]string{}
	for _, n := range names {
		ip, err := k("", "get", "pod", "web-"+n, "-o", "jsonpath={.status.podIP}")
		if err != nil {
			t.Fatalf("pod web-%s: %v\n%s", n, err, ip)
		}
		podIP[n] = strings.TrimSpace(ip)
	}
	for _, from := range names {
		for _, to := range names {
			if from == to {
				continue
			}
			waitFor(t, ctx, 5*time.Minute, fmt.Sprintf("the pod on %s reaching the pod on %s", from, to), func() (bool, string) {
				// (busybox 1.35's wget -T crashes: timeout bounds it instead.)
				o, err := k("", "exec", "web-"+from, "--", "/bin/busybox", "timeout", "10", "/bin/busybox", "wget", "-q", "-O", "-", "http://"+podIP[to]+":8080/etc/hostname")
				return err == nil && strings.TrimSpace(o) == "web-"+to, o
			})
			t.Logf("the pod on %s reached the pod on %s (%s) over flannel", from, to, podIP[to])
		}
	}

	// worker-0 holds its cluster address on its second NIC; every host's
	// clock agrees with the site's, worker-0's three hours ahead at first.
	if c, err := sshDial(h.data, "worker-0", exampleWorker0IP); err != nil {
		t.Errorf("SSH to worker-0 at %s: %v", exampleWorker0IP, err)
	} else {
		out, err := sshOutput(c, "ip -o link show; ip -4 -o addr show scope global")
		c.Close()
		if err != nil || !strings.Contains(out, exampleWorker0IP+"/24") || !strings.Contains(out, "52:54:00:00:02:01") {
			t.Errorf("worker-0's NICs and addresses (%v):\n%s", err, out)
		} else {
			t.Logf("worker-0's NICs and addresses:\n%s", out)
		}
	}
	t.Logf("worker-0's hardware clock started %v ahead of UTC", hostClockAhead)
	for _, n := range names {
		checkClock(t, h.data, n, ips[n])
	}
}

// exampleSite writes examples/site.yaml with what only a real site has
// swapped for the virtual site's, beside the credentials file worker-1's
// BMC names, and returns its path.
func exampleSite(t *testing.T, vs *vsite.Site, tc string, machines []vsite.Machine, w1Password string) string {
	t.Helper()
	data, err := os.ReadFile("../../examples/site.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	field := func(m any, path ...string) map[string]any {
		for _, k := range path {
			mm, ok := m.(map[string]any)
			if !ok {
				t.Fatalf("examples/site.yaml: no %s", strings.Join(path, "."))
			}
			m = mm[k]
		}
		mm, ok := m.(map[string]any)
		if !ok {
			t.Fatalf("examples/site.yaml: %s is not a mapping", strings.Join(path, "."))
		}
		return mm
	}
	b := field(doc, "bootstrap")
	field(b, "provisioning")["interface"] = m3Iface
	if a := field(b, "provisioning")["address"]; a != m3Address+"/24" {
		t.Fatalf("examples/site.yaml: bootstrap.provisioning.address %v, the test's is %s/24", a, m3Address)
	}
	delete(b, "external")
	delete(b, "ntp")
	delete(b, "dns")
	b["dataDisk"] = "/dev/disk/by-id/unused-in-host-mode"
	b["bmcCAFile"] = vs.BMCCAFile()

	sum, _, err := cas.HashFile(filepath.Join(tc, "files", "debian-13-compute.qcow2"))
	if err != nil {
		t.Fatal(err)
	}
	list, _ := doc["hosts"].([]any)
	if len(list) != len(machines) {
		t.Fatalf("examples/site.yaml has %d hosts, the test %d machines", len(list), len(machines))
	}
	for i, hv := range list {
		h, m := hv.(map[string]any), machines[i]
		if h["name"] != m.Name || h["bootMACAddress"] != m.MAC {
			t.Fatalf("examples/site.yaml: host %d is %v with MAC %v, the test's machine %s with %s", i, h["name"], h["bootMACAddress"], m.Name, m.MAC)
		}
		field(h, "bmc")["address"] = vs.BMCAddress(m)
		im := field(h, "image")
		if _, ok := im["url"]; ok {
			// The example's URL is the stick's own web server; its
			// checksum is a placeholder for the image's.
			if want := fmt.Sprintf("http://%s:%d/images/debian-13-compute.qcow2", m3Address, render.ImagePort); im["url"] != want {
				t.Fatalf("examples/site.yaml: %s's image URL %v, want %s", m.Name, im["url"], want)
			}
			im["checksum"] = sum.Hex()
		}
	}
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "secrets"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "secrets", "worker-1.yaml"), []byte("username: root\npassword: "+w1Password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "site.yaml")
	if err := os.WriteFile(p, out, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
