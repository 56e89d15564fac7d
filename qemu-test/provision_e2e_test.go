//go:build e2e

package qemutest

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/bootstick/bootstick/internal/command"
	"github.com/bootstick/bootstick/internal/qemu"
	"github.com/bootstick/bootstick/internal/status"
	"github.com/bootstick/bootstick/internal/testctx"
	"github.com/bootstick/bootstick/internal/vsite"
)

// Journey B's virtual site: the appliance's provisioning NIC is a tap on
// the site's bridge, beside node-0's NIC and the BMC. This machine's end
// of the veth (bse2e0) is only for the test's SSH to node-0.
const (
	jbNetns   = "bootstick-e2e-prov"
	jbIface   = "bse2e0"
	jbHostIP  = "172.22.0.50"
	jbTap     = "bse2etap0"
	jbBMC     = "172.22.0.2"
	jbBudget  = 150 * time.Minute
	jbCluster = "e2e-provision"
)

// TestProvisionFromStick is Journey B: the stick cold-boots in QEMU with
// a site of one virtual host, and everything the host gets comes from the
// stick: DHCP, TFTP and HTTP from the appliance's Ironic, the deploy
// ramdisk, the bundled compute image. node-0 ends provisioned, boots its
// disk, and takes an SSH login with the harness's key (the site's
// sshAuthorizedKeys) whose hostname and address match the site.
func TestProvisionFromStick(t *testing.T) {
	ctx, cancel := testctx.New(t, jbBudget)
	defer cancel()
	node := vsite.Machine{Name: "node-0", MAC: "52:54:00:b0:08:10", BMCPort: 6230, BMCUser: "admin", BMCPassword: "e2e-bmc-" + fmt.Sprint(time.Now().UnixNano()%1e6)}
	vs, err := vsite.Start(ctx, vsite.Options{
		Dir: t.TempDir(), Netns: jbNetns, HostIface: jbIface,
		Network: netip.MustParsePrefix("172.22.0.0/24"), HostAddr: netip.MustParseAddr("172.22.0.253"), BMCAddr: netip.MustParseAddr(jbBMC),
		Machines: []vsite.Machine{node},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer vs.Close()

	type m = map[string]any
	stick, err := BuildStick(ctx, filepath.Join(shared, "provision-stick"), os.Stderr, func(key string) ([]byte, error) {
		return vs.SiteFile(vsite.SiteConfig{
			Cluster: jbCluster,
			Image:   vsite.SiteImage{Bundled: "debian-13-compute"},
			Hosts:   []vsite.SiteHost{{Machine: "node-0", Address: netip.MustParseAddr(jbHostIP)}},
			Bootstrap: m{
				"provisioning": m{"interface": qemu.ProvisioningNICName, "address": "172.22.0.1/24"},
				"external":     m{"interface": qemu.NICName, "address": fmt.Sprintf("%s/%d", qemu.GuestAddress, qemu.GuestPrefix), "gateway": qemu.GuestGateway},
				"dataDisk":     "/dev/vda",
			},
			DHCPStart: netip.MustParseAddr("172.22.0.10"), DHCPEnd: netip.MustParseAddr("172.22.0.40"),
			SSHAuthorizedKeys: []string{key},
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	tap, err := vs.Tap(ctx, jbTap)
	if err != nil {
		t.Fatal(err)
	}
	defer tap.Close()
	run := NewRun(t, "provision")
	a := run.BootWith(ctx, stick, BootOptions{Mode: ColdMode, ProvisioningTap: tap}, "boot1")
	if _, err := a.WaitConsole(ctx, firstbootStarting, bootBudget); err != nil {
		t.Fatalf("journey B: %v", err)
	}

	// Follow node-0 through the appliance's status until firstboot is done.
	seen, order := map[string]time.Duration{}, []string{}
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	var rep *status.Report
	for {
		if r, err := a.Status(ctx); err == nil {
			rep = r
			for _, h := range r.Hosts {
				if _, ok := seen[h.State]; h.Name == "node-0" && h.State != "" && !ok {
					seen[h.State] = a.Since()
					order = append(order, h.State)
					t.Logf("node-0 %s at +%v (power-on of the appliance)", h.State, a.Since().Round(time.Second))
				}
			}
			if r.Phase == "done" || r.Phase == "failed" {
				break
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("journey B: firstboot not done in %v (node-0: %v)", jbBudget, order)
		case <-tick.C:
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "journey B, node-0's states (the appliance's status every 10 s):\n  %-14s %10s %10s\n", "STATE", "ENTERED", "FOR")
	for i, st := range order {
		took := "-"
		if i+1 < len(order) {
			took = (seen[order[i+1]] - seen[st]).Round(time.Second).String()
		}
		fmt.Fprintf(&b, "  %-14s %10s %10s\n", st, "+"+seen[st].Round(time.Second).String(), took)
	}
	t.Log(b.String())
	run.record(b.String())
	byName := map[string]status.Host{}
	for _, h := range rep.Hosts {
		byName[h.Name] = h
	}
	if rep.Phase != "done" || byName["node-0"].State != "provisioned" {
		t.Fatalf("journey B: firstboot %s with node-0 %+v", rep.Phase, byName["node-0"])
	}
	t.Logf("journey B: appliance power-on to node-0 provisioned: %v", seen["provisioned"].Round(time.Second))
	if banner, err := a.Run(ctx, "cat /etc/issue.d/bootstick.issue"); err != nil || !strings.Contains(banner, "hosts: 1 provisioned") {
		t.Errorf("journey B: the console banner does not count the hosts by state (%v):\n%s", err, banner)
	}

	// node-0 on its own disk: the site's name and address, and the key.
	cfg := &ssh.ClientConfig{User: "root", Auth: []ssh.AuthMethod{ssh.PublicKeys(stick.Signer)},
		HostKeyCallback: ssh.InsecureIgnoreHostKey(), Timeout: 10 * time.Second} // pinning host keys is the BPA's job
	var client *ssh.Client
	for client == nil {
		client, err = ssh.Dial("tcp", net.JoinHostPort(jbHostIP, "22"), cfg)
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			serial, _ := os.ReadFile(vs.SerialLog("node-0"))
			t.Fatalf("journey B: no SSH to node-0 (%v); its console:\n%s", err, command.Tail(string(serial), 30))
		case <-tick.C:
		}
	}
	defer client.Close()
	for cmd, want := range map[string]string{"hostname": "node-0", "ip -o addr": jbHostIP + "/24"} {
		sess, err := client.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		out, err := sess.CombinedOutput(cmd)
		sess.Close()
		if err != nil || !strings.Contains(string(out), want) {
			t.Errorf("journey B: %s on node-0: %v\n%s (want %s)", cmd, err, out, want)
		}
	}
}
