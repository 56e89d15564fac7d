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

// TestThreeMastersVIPFirstPoweredOff: three masters behind a control
// plane VIP, from one site (each UEFI, booting through its own PXE, with
// a Redfish BMC and its address from DHCP; two vCPUs each, as a control
// plane needs). The BPA makes the cluster on node-0 and joins node-1 and
// node-2 one at a time; keepalived holds the VIP on a master and every
// node and the operator's kubeconfig use it. Then node-0, the first
// master, is powered off as an operator does it (its BareMetalHost's
// online: false, which the baremetal-operator carries out through its
// BMC): another master takes the VIP, and the API answers through it,
// with node-0 NotReady and the others Ready; etcd keeps its quorum (a
// Secret is written and read back) and still lists three members. node-0
// powered on again is a Ready node again. Under TCG on two cores this
// takes two to three hours: make e2e's.
func TestThreeMastersVIPFirstPoweredOff(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the stick and makes a three-master cluster on QEMU machines (root, make toolchain)")
	}
	tc, iso, h, ctx := startJourney(t, 190*time.Minute)
	kubectl := filepath.Join(tc, "bin", "kubectl")
	const cluster, vip = "edge", node0VIP
	var machines []vsite.Machine
	var hosts []vsite.SiteHost
	for i := range 3 {
		m := vsite.Machine{Name: fmt.Sprintf("node-%d", i), MAC: fmt.Sprintf("52:54:00:b0:07:3%d", i), BMC: vsite.BMCRedfish, BMCPort: 8443 + i,
			BMCUser: "admin", BMCPassword: "bmc-" + randomHex(t, 6), Firmware: vsite.FirmwareUEFI, CPUs: controlPlaneCPUs}
		machines = append(machines, m)
		hosts = append(hosts, vsite.SiteHost{Machine: m.Name}) // masters, DHCP
	}
	vs := startSite(t, ctx, machines)
	sitePath := writeSiteBeside(t, vs, vsite.SiteConfig{Cluster: cluster, Image: vsite.SiteImage{Bundled: "debian-13-compute"},
		Hosts: hosts, ControlPlaneVIP: vip})
	took, _ := h.runSite(iso, sitePath)
	t.Logf("firstboot run, to the three masters provisioned: %s", took)
	var app []appHost
	for _, m := range machines {
		app = append(app, appHost{m.Name, inspectedAddress(t, ctx, kubectl, m.Name, m.MAC)})
	}
	p := waitClusterReady(t, ctx, kubectl, cluster, h.data, app)
	for _, hs := range p.Status.Hosts {
		made := bpa.PhaseJoin
		if hs.Name == "node-0" {
			made = bpa.PhaseInit
		}
		phaseTable(t, hs, made)
	}
	// The masters joined one at a time, after the init: each started
	// after the one before it ended.
	steps := []*bpa.Phase{phase(*hostStatus(p, "node-0"), bpa.PhaseInit), phase(*hostStatus(p, "node-1"), bpa.PhaseJoin), phase(*hostStatus(p, "node-2"), bpa.PhaseJoin)}
	for i := 1; i < len(steps); i++ {
		prev, cur := steps[i-1], steps[i]
		if prev == nil || cur == nil || prev.Finished == nil || cur.Started.Before(prev.Finished) {
			t.Errorf("node-%d's join (%+v) started before node-%d's %+v ended", i, cur, i-1, prev)
		}
	}
	_, appConf := operatorKubeconfig(t, ctx, kubectl, cluster)
	a := &appCluster{ctx: ctx, kubectl: kubectl, appConf: appConf, etcdNode: "node-0"}
	a.view(t, "three masters").want(t, "three masters", []string{"node-0", "node-1", "node-2"}, nil)
	holder := vipHolder(t, h.data, app, vip)
	t.Logf("the VIP %s is on %s", vip, holder)

	// node-0 powered off, as the operator does it.
	if out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", adminConf, "-n", "metal3", "patch", "bmh", "node-0",
		"--type", "merge", "-p", `{"spec":{"online":false}}`).CombinedOutput(); err != nil {
		t.Fatalf("kubectl patch bmh node-0 online=false: %v\n%s", err, out)
	}
	waitFor(t, ctx, 10*time.Minute, "node-0 powered off by its BMC", func() (bool, string) {
		s, err := vs.PowerState(ctx, "node-0")
		return err == nil && s == "shut off", fmt.Sprint(s, err)
	})
	off := time.Now()
	t.Log("node-0 is off")
	a.etcdNode = "node-1"
	waitFor(t, ctx, 15*time.Minute, "the API answering at the VIP, node-0 NotReady and the others Ready", func() (bool, string) {
		out, err := a.run("get", "nodes", "--request-timeout=20s", "-o",
			`jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status} {end}`)
		s := string(out)
		return err == nil && strings.Contains(s, "node-0=Unknown") && strings.Contains(s, "node-1=True") && strings.Contains(s, "node-2=True"), s
	})
	t.Logf("node-0 off to the API answering at the VIP with node-0 NotReady: %s", time.Since(off).Round(time.Second))
	if got := vipHolder(t, h.data, app[1:], vip); got == "" {
		t.Errorf("neither node-1 nor node-2 holds the VIP %s", vip)
	} else {
		t.Logf("the VIP %s moved to %s", vip, got)
	}
	// etcd keeps its quorum: a write and a read through the VIP.
	value := "quorum-" + randomHex(t, 6)
	if out, err := a.run("create", "configmap", "quorum", "--from-literal=v="+value); err != nil {
		t.Errorf("writing a ConfigMap with node-0 off: %v\n%s", err, out)
	} else if out, err := a.run("get", "configmap", "quorum", "-o", "jsonpath={.data.v}"); err != nil || string(out) != value {
		t.Errorf("reading it back: %q, %v", out, err)
	}
	members := string(a.etcdctl(t, "member", "list"))
	if strings.Count(strings.TrimSpace(members), "\n") != 2 {
		t.Errorf("etcd's members with node-0 off:\n%s\nwant three (node-0's stays: it is off, not gone)", members)
	}
	a.view(t, "node-0 off")

	// node-0 on again: a Ready node again.
	if out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", adminConf, "-n", "metal3", "patch", "bmh", "node-0",
		"--type", "merge", "-p", `{"spec":{"online":true}}`).CombinedOutput(); err != nil {
		t.Fatalf("kubectl patch bmh node-0 online=true: %v\n%s", err, out)
	}
	on := time.Now()
	waitFor(t, ctx, 20*time.Minute, "node-0 a Ready node again", func() (bool, string) {
		out, err := a.run("get", "node", "node-0", "--request-timeout=20s", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		return err == nil && string(out) == "True", string(out)
	})
	t.Logf("node-0 powered on to a Ready node: %s", time.Since(on).Round(time.Second))
	a.view(t, "node-0 back").want(t, "node-0 back", []string{"node-0", "node-1", "node-2"}, nil)
}

// vipHolder is the host of hosts that holds the VIP, as each says over
// SSH; "" for none.
func vipHolder(t *testing.T, data string, hosts []appHost, vip string) string {
	t.Helper()
	for _, h := range hosts {
		c, err := sshDial(data, h.name, h.ip)
		if err != nil {
			t.Logf("SSH to %s at %s: %v", h.name, h.ip, err)
			continue
		}
		out, err := sshOutput(c, "ip -4 -o addr show to "+vip)
		c.Close()
		if err == nil && strings.Contains(out, " "+vip+"/") {
			return h.name
		}
	}
	return ""
}
