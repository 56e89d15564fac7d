//go:build e2e

package firstboot

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bpa "github.com/bootstick/bootstick/internal/bpa/v1alpha1"
	"github.com/bootstick/bootstick/internal/vsite"
)

// TestKubectlPathDHCP is the seed's own procedure, with no site file for
// the host: on an appliance whose site names node-0 only (and lets DHCP
// answer any machine, bootstrap.provisioning.dhcpHosts: any), the
// operator applies with kubectl, as internal/bpa/README.md shows it, a
// BMC credentials Secret, a BareMetalHost for node-1 (UEFI, an IPMI BMC,
// an image and no user data) and a Provisioning of its own naming node-1
// its master. The BPA gives node-1 user data with a host key it pins
// before the baremetal-operator provisions it, installs it, makes the
// cluster, and the operator reads its kubeconfig: node-1 is a Ready node.
// Under TCG this takes about an hour: make e2e's.
func TestKubectlPathDHCP(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the stick and provisions QEMU machines (root, make toolchain)")
	}
	tc, iso, h, ctx := startJourney(t, 150*time.Minute)
	kubectl := filepath.Join(tc, "bin", "kubectl")
	site0 := vsite.Machine{Name: "node-0", MAC: "52:54:00:b0:07:50", BMC: vsite.BMCRedfish, BMCPort: 8443, BMCUser: "admin",
		BMCPassword: "bmc-" + randomHex(t, 6), Firmware: vsite.FirmwareUEFI, CPUs: controlPlaneCPUs}
	byHand := vsite.Machine{Name: "node-1", MAC: "52:54:00:b0:07:51", BMC: vsite.BMCIPMI, BMCPort: 6231, BMCUser: "admin",
		BMCPassword: "bmc-" + randomHex(t, 6), Firmware: vsite.FirmwareUEFI, CPUs: controlPlaneCPUs}
	vs := startSite(t, ctx, []vsite.Machine{site0, byHand})
	sitePath := writeSiteBeside(t, vs, vsite.SiteConfig{Cluster: "edge", Image: vsite.SiteImage{Bundled: "debian-13-compute"},
		Hosts: []vsite.SiteHost{{Machine: "node-0"}}, DHCPHosts: "any"})
	took, logPath := h.runSite(iso, sitePath)
	t.Logf("firstboot run, to node-0 (the site's) provisioned: %s", took)

	// The operator's steps, as internal/bpa/README.md gives them.
	admin := func(stdin string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", adminConf}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	admin("", "-n", "metal3", "create", "secret", "generic", "node-1-bmc-secret",
		"--from-literal=username="+byHand.BMCUser, "--from-literal=password="+byHand.BMCPassword)
	image := admin("", "-n", "metal3", "get", "bmh", "node-0", "-o", "jsonpath={.spec.image}")
	start := time.Now()
	admin(fmt.Sprintf(`apiVersion: metal3.io/v1alpha1
kind: BareMetalHost
metadata: {name: node-1, namespace: metal3}
spec:
  online: true
  bootMACAddress: %s
  bootMode: UEFI
  bmc: {address: %q, credentialsName: node-1-bmc-secret}
  image: %s
`, byHand.MAC, vs.BMCAddress(byHand), image), "apply", "-f", "-")
	admin(fmt.Sprintf(`apiVersion: bpa.akraino.org/v1alpha1
kind: Provisioning
metadata:
  name: edge-b
  namespace: metal3
  labels: {cluster: edge-b}
spec:
  masters:
  - node-1: {mac-address: "%s"}
`, byHand.MAC), "apply", "-f", "-")

	// The BPA gives node-1 user data and pins its host key, before the
	// baremetal-operator writes its config drive.
	waitFor(t, ctx, 5*time.Minute, "node-1's user data and host key from the BPA", func() (bool, string) {
		out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", adminConf, "-n", "metal3", "get", "bmh", "node-1", "-o",
			`jsonpath={.spec.userData.name} {.metadata.annotations.bpa\.akraino\.org/host-key}`).Output()
		f := strings.Fields(string(out))
		return err == nil && len(f) == 3 && f[0] == "node-1-bpa-user-data" && f[1] == "ssh-ed25519", string(out)
	})
	waitFor(t, ctx, 60*time.Minute, "node-1 provisioned", func() (bool, string) {
		out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", adminConf, "-n", "metal3", "get", "bmh", "node-1",
			"-o", "jsonpath={.status.provisioning.state}").Output()
		return err == nil && string(out) == "provisioned", string(out)
	})
	ip := inspectedAddress(t, ctx, kubectl, "node-1", byHand.MAC)
	t.Logf("node-1, applied with kubectl, provisioned in %s at %s", time.Since(start).Round(time.Second), ip)
	p := waitClusterReady(t, ctx, kubectl, "edge-b", h.data, []appHost{{"node-1", ip}})
	phaseTable(t, p.Status.Hosts[0], bpa.PhaseInit)
	t.Logf("kubectl apply to node-1 a Ready node of cluster edge-b: %s", time.Since(start).Round(time.Second))

	// The operator's kubeconfig, from the BPA.
	_, appConf := operatorKubeconfig(t, ctx, kubectl, "edge-b")
	a := &appCluster{ctx: ctx, kubectl: kubectl, appConf: appConf, etcdNode: "node-1"}
	a.view(t, "edge-b").want(t, "edge-b", []string{"node-1"}, nil)

	// Nothing secret in the logs, the status or the Events: node-1's BMC
	// password and its host key's private half (in its user-data Secret
	// only).
	n := &node0{h: h, vs: vs, kubectl: kubectl, machine: site0, logPath: logPath}
	n.checkNoSecret(t, ctx, p, map[string]string{"node-1's BMC password": byHand.BMCPassword})
}
