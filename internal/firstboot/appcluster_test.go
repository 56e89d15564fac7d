package firstboot

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"k8s.io/apimachinery/pkg/api/meta"

	bpacontroller "github.com/bootstick/bootstick/internal/bpa/controller"
	"github.com/bootstick/bootstick/internal/bpa/install"
	bpa "github.com/bootstick/bootstick/internal/bpa/v1alpha1"
	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/command"
	"github.com/bootstick/bootstick/internal/kube"
	"github.com/bootstick/bootstick/internal/registry"
	"github.com/bootstick/bootstick/internal/render"
	"github.com/bootstick/bootstick/internal/site"
	"github.com/bootstick/bootstick/internal/sshkeys"
	"github.com/bootstick/bootstick/internal/testctx"
	"github.com/bootstick/bootstick/internal/vsite"
)

// checkClock checks that the host's clock agrees with this machine's
// (the site's clock in host mode) within a second, and that its time
// service took the time from the bootstrap machine (m3Address).
func checkClock(t *testing.T, data, name, ip string) {
	t.Helper()
	c, err := sshDial(data, name, ip)
	if err != nil {
		t.Errorf("SSH to %s at %s: %v", name, ip, err)
		return
	}
	defer c.Close()
	before := time.Now()
	out, err := sshOutput(c, "date +%s.%N")
	after := time.Now()
	secs, perr := strconv.ParseFloat(out, 64)
	if err != nil || perr != nil {
		t.Errorf("%s's clock: %q %v %v", name, out, err, perr)
		return
	}
	theirs := time.Unix(0, int64(secs*1e9))
	if theirs.Before(before.Add(-time.Second)) || theirs.After(after.Add(time.Second)) {
		t.Errorf("%s's clock reads %s, this machine's %s to %s: more than a second apart",
			name, theirs.Format(time.RFC3339Nano), before.Format(time.RFC3339Nano), after.Format(time.RFC3339Nano))
	} else {
		t.Logf("%s's clock agrees with the site's within a second (%v between this machine's two readings)",
			name, after.Sub(before).Round(time.Millisecond))
	}
	// Its kernel reads the clock from the TSC, as a server's does, not
	// from an emulated HPET, a trap into QEMU each time (the machine's
	// vCPUs are cores of one socket: vsite's domainXML).
	if cs, err := sshOutput(c, "cat /sys/devices/system/clocksource/clocksource0/current_clocksource"); err != nil || strings.TrimSpace(cs) != "tsc" {
		t.Errorf("%s's clock source is %q (%v), want tsc", name, cs, err)
	}
	journal, err := sshOutput(c, "journalctl -b -u systemd-timesyncd --no-pager -o cat")
	if err != nil || !strings.Contains(journal, "Contacted time server "+m3Address+":123") {
		t.Errorf("%s's timesyncd did not take the time from the bootstrap machine %s (%v):\n%s", name, m3Address, err, journal)
	} else {
		t.Logf("%s's timesyncd:\n%s", name, journal)
	}
}

// checkFirewallFromHost: from a provisioned host (a machine of the
// provisioning network), the bootstrap machine's registry answers, and
// its sshd, etcd, API server and kubelet are refused by its firewall:
// "No route to host" (ICMP administratively prohibited), not the
// "Connection refused" of a port nobody listens on.
func checkFirewallFromHost(t *testing.T, data, name, ip string) {
	t.Helper()
	c, err := sshDial(data, name, ip)
	if err != nil {
		t.Errorf("SSH to %s at %s: %v", name, ip, err)
		return
	}
	defer c.Close()
	for _, p := range []struct {
		port int
		what string
		open bool
	}{{5000, "registry", true}, {22, "sshd", false}, {2379, "etcd", false}, {6443, "API server", false}, {10250, "kubelet", false}} {
		out, _ := sshOutput(c, fmt.Sprintf("timeout 10 bash -c 'exec 3<>/dev/tcp/%s/%d' 2>&1 && echo connected", m3Address, p.port))
		out = strings.TrimSpace(out)
		switch {
		case p.open && !strings.HasSuffix(out, "connected"):
			t.Errorf("%s to the bootstrap machine's %s (%s:%d): %q, want a connection", name, p.what, m3Address, p.port, out)
		case !p.open && !strings.Contains(out, "No route to host"):
			t.Errorf("%s to the bootstrap machine's %s (%s:%d): %q, want refused by its firewall (No route to host)", name, p.what, m3Address, p.port, out)
		default:
			t.Logf("firewall: %s to the bootstrap machine's %-10s (port %5d): %s", name, p.what, p.port, out)
		}
	}
}

// runSite runs firstboot in host mode from the stick iso with the site
// at sitePath, its output in a log whose tail a failure shows, and
// returns how long it took (until every host is provisioned) and the
// log's path.
func (h *hostRun) runSite(iso, sitePath string) (time.Duration, string) {
	h.t.Helper()
	logPath := filepath.Join(h.t.TempDir(), "run.log")
	f, err := os.Create(logPath)
	if err != nil {
		h.t.Fatal(err)
	}
	run := h.cmd("run", "--mode", "host", "--bundle", iso, "--data", h.data, "--site", sitePath)
	run.Stdout, run.Stderr = f, f
	start := time.Now()
	err = run.Run()
	f.Close()
	if err != nil {
		out, _ := os.ReadFile(logPath)
		h.t.Fatalf("firstboot run: %v\n%s", err, command.Tail(string(out), 40))
	}
	return time.Since(start).Round(time.Second), logPath
}

// hostClockAhead is how far ahead of UTC the host's hardware clock starts:
// a CMOS battery gone flat, a firmware set to local time far east.
const hostClockAhead = 3 * time.Hour

// node0 is the virtual site of TestProvisionDHCPClock (make test) and
// TestAppClusterDHCPClock (make e2e), up to node-0 provisioned. firstboot
// runs in host mode from the real stick (an ISO built by mkusb, mounted as
// the bundle). node-0 is shaped as most servers are: UEFI firmware whose
// own PXE client boots from the network (the NIC has no option ROM), a
// Redfish BMC over HTTPS with a certificate of the site's BMC CA, and no
// network data in the site (DHCP, as most sites give their servers). Its
// hardware clock starts three hours ahead.
type node0 struct {
	h       *hostRun
	vs      *vsite.Site
	machine vsite.Machine
	kubectl string
	// hostIP is node-0's address from DHCP, as inspection saw it.
	hostIP string
	// logPath is firstboot run's log.
	logPath string
	// iso is the stick firstboot runs from; site is the site it was
	// given, less its hosts (see siteWith).
	iso  string
	site vsite.SiteConfig
}

const (
	node0Cluster = "edge"
	// node0VIP is the control plane's VIP, outside writeSite's DHCP
	// range: keepalived on node-0, the one master, holds it, and the
	// cluster's endpoint is it rather than node-0's address from DHCP.
	node0VIP = "172.22.0.100"
)

// startJourney is where each journey of host mode starts: the toolchain,
// the stick built from this checkout, firstboot in host mode on this
// machine, and a context that ends after budget.
func startJourney(t *testing.T, budget time.Duration) (tc, iso string, h *hostRun, ctx context.Context) {
	t.Helper()
	tc = toolchainDir(t)
	iso = buildStickISO(t)
	h = newHostRun(t, tc)
	ctx, cancel := testctx.New(t, budget)
	t.Cleanup(cancel)
	return tc, iso, h, ctx
}

// provisionNode0 brings node0's site up until node-0 is provisioned, and
// checks its boot as its console and firstboot status show it. Its
// context ends after budget. The virtual site has the more machines too,
// powered off, which its site file does not name (day 2 adds them).
func provisionNode0(t *testing.T, budget time.Duration, more ...vsite.Machine) (*node0, context.Context) {
	t.Helper()
	tc, iso, h, ctx := startJourney(t, budget)
	// Two vCPUs: a control plane on one emulated CPU (TCG, no KVM) ran at
	// load 6 to 9, and etcd timed its requests out during kubeadm init.
	m := vsite.Machine{Name: "node-0", MAC: "52:54:00:b0:07:20", BMC: vsite.BMCRedfish, BMCPort: 8443,
		BMCUser: "admin", BMCPassword: "bmc-" + randomHex(t, 6), Firmware: vsite.FirmwareUEFI,
		CPUs: controlPlaneCPUs, ClockAhead: hostClockAhead}
	vs := startSite(t, ctx, append([]vsite.Machine{m}, more...))
	n := &node0{h: h, vs: vs, machine: m, kubectl: filepath.Join(tc, "bin", "kubectl"), iso: iso, site: vsite.SiteConfig{
		Cluster:         node0Cluster,
		Image:           vsite.SiteImage{Bundled: "debian-13-compute"},
		ControlPlaneVIP: node0VIP,
	}}
	sitePath := n.siteWith(t, vsite.SiteHost{Machine: "node-0"}) // no network data: DHCP
	attacked := startAttacker(t, ctx, vs, "node-0", m.MAC)
	took, logPath := h.runSite(iso, sitePath)
	t.Logf("firstboot run, to node-0 provisioned: %s", took)
	attacked()
	n.logPath = logPath
	n.hostIP = inspectedAddress(t, ctx, n.kubectl, "node-0", m.MAC)
	t.Logf("node-0's address from DHCP, as inspection saw it: %s", n.hostIP)
	if console, err := vs.Console("node-0"); err != nil {
		t.Error(err)
	} else if lines, err := vsite.BootEvidence(m, n.hostIP, console); err != nil {
		t.Error(err)
	} else {
		t.Logf("node-0's console: %s", strings.Join(lines, "; "))
		c, err := kube.Load(adminConf)
		if err != nil {
			t.Fatal(err)
		}
		checkProvisioningTLS(t, ctx, c, "node-0", console)
	}
	if rep, _ := h.statusJSON(); len(rep.Hosts) != 1 || rep.Hosts[0].State != "provisioned" ||
		rep.Hosts[0].BMCType != "redfish" || rep.Hosts[0].BootMode != "UEFI" || rep.Hosts[0].BootInterface != "ipxe" {
		t.Errorf("status shows the hosts as %+v, want node-0 provisioned by redfish, UEFI/ipxe", rep.Hosts)
	}
	return n, ctx
}

// siteWith writes node0's site with these hosts, in a folder of its own
// with the BMC CA beside it (writeSiteBeside), and returns its path.
func (n *node0) siteWith(t *testing.T, hosts ...vsite.SiteHost) string {
	t.Helper()
	c := n.site
	c.Hosts = hosts
	return writeSiteBeside(t, n.vs, c)
}

func (n *node0) provisioning(ctx context.Context) (*bpa.Provisioning, error) {
	return getProvisioning(ctx, n.kubectl, node0Cluster)
}

// killBPAInInstall waits until the BPA installs node-0's packages, and
// kills it there (its Pod deleted); it returns when.
func (n *node0) killBPAInInstall(t *testing.T, ctx context.Context) time.Time {
	t.Helper()
	waitFor(t, ctx, 15*time.Minute, "the BPA installing node-0", func() (bool, string) {
		p, err := n.provisioning(ctx)
		if err != nil || len(p.Status.Hosts) == 0 {
			return false, fmt.Sprint(err)
		}
		ph := phase(p.Status.Hosts[0], bpa.PhaseInstall)
		return ph != nil && ph.Finished == nil, describe(p)
	})
	killed := time.Now()
	if out, err := exec.CommandContext(ctx, n.kubectl, "--kubeconfig", adminConf, "-n", "bpa-system", "delete", "pod",
		"-l", "app.kubernetes.io/name=bpa-operator", "--wait=true").CombinedOutput(); err != nil {
		t.Fatalf("killing the BPA: %v\n%s", err, out)
	}
	t.Logf("killed the BPA during node-0's install phase")
	return killed
}

// checkInstallRanAgain fails unless node-0's install phase, as status
// now shows it, started after the BPA was killed: the new BPA ran it
// again rather than taking the half-done one as done.
func checkInstallRanAgain(t *testing.T, h bpa.HostStatus, killed time.Time) {
	t.Helper()
	if ph := phase(h, bpa.PhaseInstall); ph == nil || ph.Started.Time.Before(killed.Add(-time.Second)) {
		t.Errorf("node-0's install phase (%+v) did not start after the BPA was killed at %s: the new BPA did not run it again", ph, killed)
	}
}

// checkOS checks node-0's own OS over SSH, as an operator would: sshd
// takes keys only (the user data's ssh_pwauth: false) and root has no
// password to guess; it kept the address its deploy ramdisk had from DHCP
// (the site's DHCP server knows a host by its MAC, not by the client id,
// which differs), with the bootstrap machine as its router; its clock
// agrees with the site's; the bootstrap machine's firewall refuses it all
// but the services of the provisioning network.
func (n *node0) checkOS(t *testing.T) {
	t.Helper()
	c, err := sshDial(n.h.data, "node-0", n.hostIP)
	if err != nil {
		t.Errorf("SSH to node-0 at %s: %v", n.hostIP, err)
		return
	}
	out, err := sshOutput(c, "ip -4 -o addr show scope global; ip route show default")
	pw, perr := sshOutput(c, "sshd -T | grep -i '^passwordauthentication '; passwd -S root | cut -d' ' -f2")
	c.Close()
	if pwLines := strings.Fields(pw); perr != nil || len(pwLines) != 3 || pwLines[1] != "no" || pwLines[2] != "L" {
		t.Errorf("node-0's sshd and root password (%v): %q, want passwordauthentication no and root's password locked (L)", perr, pw)
	} else {
		t.Logf("node-0: sshd %s; root's password %s (locked)", strings.Join(pwLines[:2], " "), pwLines[2])
	}
	if err != nil || !strings.Contains(out, " "+n.hostIP+"/24 ") || !strings.Contains(out, "dynamic") || !strings.Contains(out, "default via "+m3Address+" ") {
		t.Errorf("node-0 does not hold %s/24 by DHCP with its default route via %s (%v):\n%s", n.hostIP, m3Address, err, out)
	} else {
		t.Logf("node-0's addresses and default route:\n%s", out)
	}
	checkClock(t, n.h.data, "node-0", n.hostIP)
	checkFirewallFromHost(t, n.h.data, "node-0", n.hostIP)
}

// checkNoSecret fails when the BPA's log, firstboot's log, the
// Provisioning's status or the events hold the site's SSH private key,
// node-0's host key, node-0's BMC password or any of more.
func (n *node0) checkNoSecret(t *testing.T, ctx context.Context, p *bpa.Provisioning, more map[string]string) {
	t.Helper()
	keyPEM, err := os.ReadFile(filepath.Join(n.h.data, "ssh", sshkeys.PrivateKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	hostKey, err := os.ReadFile(filepath.Join(n.h.data, "ssh", sshkeys.HostKeysDir, "node-0", sshkeys.PrivateKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	statusJSON, _ := json.Marshal(p.Status)
	events, _ := exec.CommandContext(ctx, n.kubectl, "--kubeconfig", adminConf, "get", "events", "-A", "-o", "json").Output()
	runLog, _ := os.ReadFile(n.logPath)
	texts := map[string]string{
		"the BPA's log": podLog("bpa-system", "deploy/bpa-operator", ""), "firstboot's log": string(runLog),
		"the Provisioning's status": string(statusJSON), "events": string(events),
	}
	secrets := map[string]string{
		"the SSH private key": keyBody(keyPEM), "node-0's host key": keyBody(hostKey), "node-0's BMC password": n.machine.BMCPassword,
	}
	maps.Copy(secrets, more)
	for what, s := range secrets {
		for where, text := range texts {
			if strings.Contains(text, s) {
				t.Errorf("%s holds %s", where, what)
			}
		}
	}
}

// checkDHCP: the provisioning network's DHCP refuses a machine the site
// does not name, and node-0's lease survives Ironic's restart.
func (n *node0) checkDHCP(t *testing.T, ctx context.Context) {
	t.Helper()
	checkUnknownMACRefused(t, ctx, n.h, n.vs, n.machine.MAC)
	checkLeasesSurvive(t, ctx, n.kubectl, n.h.data, "node-0", n.machine.MAC, n.hostIP)
}

// TestProvisionDHCPClock is the provisioning half of the application
// cluster's journey (TestAppClusterDHCPClock, in make e2e, forms the
// cluster too: kubeadm on a TCG guest takes it past make test's budget).
// node-0 (see node0) is provisioned; the BPA connects over SSH at the
// address node-0 had from DHCP, with the host key firstboot gave it, and
// installs the packages from the stick's web server. The BPA is killed
// during the install, and the new one runs it again to its end. node-0's
// OS, checked over SSH, takes keys only and holds its DHCP address with
// the bootstrap machine as its router; its clock agrees with the site's
// within a second, though its hardware clock starts three hours ahead
// (the deploy ramdisk sets its clock from the site's before it makes the
// certificate Ironic checks, and the OS does before anything else); the
// bootstrap machine's firewall lets it reach the registry and nothing
// else. DHCP answers the site's hosts only: a machine the site does not
// name asks for an address and gets none, and dnsmasq's log shows each
// refusal. Ironic restarts, and its DHCP leases, on the data disk,
// survive it. No secret reaches a log, the status or an event.
func TestProvisionDHCPClock(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the stick and provisions a QEMU machine through a Redfish BMC (root, make toolchain)")
	}
	n, ctx := provisionNode0(t, 40*time.Minute)
	killed := n.killBPAInInstall(t, ctx)
	n.checkOS(t)
	n.checkDHCP(t, ctx)

	var p *bpa.Provisioning
	// The wait ends at any finished install; checkInstallRanAgain then
	// says in words whether the new BPA ran it.
	waitFor(t, ctx, 15*time.Minute, "the new BPA to finish node-0's install phase", func() (bool, string) {
		var err error
		p, err = n.provisioning(ctx)
		if err != nil || len(p.Status.Hosts) == 0 {
			return false, fmt.Sprint(err)
		}
		h := p.Status.Hosts[0]
		ph := phase(h, bpa.PhaseInstall)
		return h.Error == "" && ph != nil && ph.Finished != nil, describe(p)
	})
	checkInstallRanAgain(t, p.Status.Hosts[0], killed)
	// What the install left on node-0, as its operator would look.
	if c, err := sshDial(n.h.data, "node-0", n.hostIP); err != nil {
		t.Errorf("SSH to node-0 at %s: %v", n.hostIP, err)
	} else {
		out, err := sshOutput(c, "kubeadm version -o short && kubelet --version && containerd --version && systemctl is-active containerd")
		if err != nil || !strings.Contains(out, "Kubernetes v") || !strings.HasSuffix(strings.TrimSpace(out), "\nactive") {
			t.Errorf("node-0 after the install phase (%v): %q, want kubeadm, the kubelet and containerd installed, and containerd running", err, out)
		} else {
			t.Logf("node-0 after the install phase:\n%s", out)
		}
		checkCNIPlugins(t, c)
		c.Close()
	}
	for _, name := range []string{bpa.PhaseConnect, bpa.PhaseInstall} {
		if ph := phase(p.Status.Hosts[0], name); ph != nil && ph.Finished != nil {
			t.Logf("node-0's %s phase took %s", name, ph.Finished.Sub(ph.Started.Time).Round(time.Second))
		}
	}
	n.checkNoSecret(t, ctx, p, nil)
}

// hostCNIPlugins are the reference CNI plugins a host gets from the stick
// (images/recipes.yaml, cni-plugins), at the recipe's version.
var hostCNIPlugins = []string{"bandwidth", "bridge", "dhcp", "dummy", "firewall", "host-device", "host-local", "ipvlan",
	"loopback", "macvlan", "portmap", "ptp", "sbr", "static", "tap", "tuning", "vlan", "vrf"}

// checkCNIPlugins: each reference CNI plugin on the host, run as a person
// would to ask what it is (no CNI_COMMAND), names itself at the stick's
// version; flannel's is beside them; the stick's zstd copies were
// unpacked and are gone; the dhcp plugin's daemon listens on its socket.
func checkCNIPlugins(t *testing.T, c *ssh.Client) {
	t.Helper()
	cmd := "for p in " + strings.Join(hostCNIPlugins, " ") + `; do /opt/cni/bin/$p 2>&1 | head -n 1; done; test -x /opt/cni/bin/flannel && echo flannel; ls /var/lib/bootstick/packages; ` +
		`echo "dhcp daemon: $(systemctl is-enabled cni-dhcp.socket) $(systemctl is-active cni-dhcp.socket) $(stat -c %F /run/cni/dhcp.sock)"`
	out, err := sshOutput(c, cmd)
	if err != nil {
		t.Errorf("node-0's CNI plugins: %v\n%s", err, out)
		return
	}
	for _, p := range hostCNIPlugins {
		if want := "CNI " + p + " plugin v1.10.0\n"; !strings.Contains(out, want) {
			t.Errorf("node-0's /opt/cni/bin/%s does not say %q", p, strings.TrimSpace(want))
		}
	}
	if !strings.Contains(out, "\nflannel\n") || strings.Contains(out, ".zst") || !strings.Contains(out, "kubelet\n") {
		t.Errorf("node-0: want flannel's plugin, kubelet unpacked and no zstd copy left:\n%s", out)
	}
	// The dhcp plugin's daemon listens, for networks with ipam: dhcp.
	if !strings.HasSuffix(out, "\ndhcp daemon: enabled active socket") {
		t.Errorf("node-0: want the dhcp plugin's daemon's socket enabled and listening:\n%s", out)
	}
	t.Logf("node-0's CNI plugins and packages:\n%s", out)
}

// unknownMAC is a machine no site of the tests names: a locally
// administered address, which no NIC ships with.
const unknownMAC = "02:00:00:b0:07:99"

// unknownMACWait is how long the machine of unknownMAC waits for an
// offer, sending a DHCPDISCOVER each second (dhcpprobe.Resend).
const unknownMACWait = 15 * time.Second

// checkUnknownMACRefused: a machine the site does not name (unknownMAC)
// asks the provisioning network's DHCP for an address from inside the
// test's network namespace (vsite.Site.DHCPDiscover: a NIC of its own on
// the site's bridge) and gets no offer, and Ironic's dnsmasq logs each
// refusal of that MAC ("<xid> DHCPDISCOVER(<iface>) <mac> ignored"),
// while firstboot status says DHCP answers the site's hosts only, and
// host, the site's one host (its boot MAC), among them.
func checkUnknownMACRefused(t *testing.T, ctx context.Context, h *hostRun, vs *vsite.Site, host string) {
	t.Helper()
	r, err := vs.DHCPDiscover(ctx, unknownMAC, unknownMACWait)
	if err != nil {
		t.Errorf("asking DHCP for an address as %s: %v", unknownMAC, err)
		return
	}
	if r.Offer != nil {
		t.Errorf("DHCP offered %s (server %s) to %s, a MAC the site does not name", r.Offer.Address, r.Offer.Server, unknownMAC)
	}
	refusal := fmt.Sprintf("%d DHCPDISCOVER(%s) %s ignored", r.XID, m3Iface, unknownMAC)
	var seen []string
	waitFor(t, ctx, 2*time.Minute, "dnsmasq's log to show "+refusal, func() (bool, string) {
		seen = nil
		log := podLog(render.IronicNamespace, "deploy/ironic", "dnsmasq")
		for _, l := range strings.Split(log, "\n") {
			if strings.Contains(l, refusal) {
				seen = append(seen, l)
			}
		}
		return len(seen) > 0, command.Tail(log, 10)
	})
	t.Logf("a machine of MAC %s (no host of the site) asked DHCP for an address for %s: no offer; Ironic's dnsmasq logged %d refusals:\n%s",
		unknownMAC, unknownMACWait, len(seen), strings.Join(seen, "\n"))
	rep, _ := h.statusJSON()
	if d := rep.Cluster; d == nil || d.DHCP == nil || d.DHCP.Hosts != site.DHCPHostsSite || !slices.Equal(d.DHCP.Answers, []string{host}) {
		t.Errorf("status shows DHCP as %+v, want the site's hosts only, answering %s", rep.Cluster, host)
	} else {
		t.Logf("status: DHCP answers %s (%s), refuses %v", d.DHCP.Hosts, strings.Join(d.DHCP.Answers, ", "), d.DHCP.Refuses)
	}
}

// checkLeasesSurvive restarts the Ironic Pod (its dnsmasq with it): the
// leases are on the data disk, where the new dnsmasq reads them from, and
// still hold the host's address, so that a renewal keeps it. (The compute
// image has no D-Bus, so networkctl cannot make the host renew now.)
func checkLeasesSurvive(t *testing.T, ctx context.Context, kubectl, data, name, mac, ip string) {
	t.Helper()
	leases := filepath.Join(data, "dhcp-leases", "dnsmasq.leases")
	holds := func() (bool, string) {
		b, err := os.ReadFile(leases)
		return err == nil && strings.Contains(string(b), mac+" "+ip+" "), fmt.Sprintf("%v: %s", err, b)
	}
	if ok, got := holds(); !ok {
		t.Errorf("the leases on the data disk (%s) have no %s for %s: %s", leases, ip, mac, got)
	}
	k := func(args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", adminConf, "-n", "ironic"}, args...)...).CombinedOutput()
		return string(out), err
	}
	before, err := k("get", "pods", "-l", "app.kubernetes.io/name=ironic", "-o", "jsonpath={.items[*].metadata.uid}")
	if err != nil {
		t.Fatalf("the ironic Pod: %v\n%s", err, before)
	}
	if out, err := k("rollout", "restart", "deploy/ironic"); err != nil {
		t.Fatalf("restarting Ironic: %v\n%s", err, out)
	}
	if out, err := k("rollout", "status", "deploy/ironic", "--timeout=15m"); err != nil {
		t.Fatalf("Ironic after its restart: %v\n%s", err, out)
	}
	after, err := k("get", "pods", "-l", "app.kubernetes.io/name=ironic", "-o", "jsonpath={.items[*].metadata.uid}")
	if err != nil || !slices.ContainsFunc(strings.Fields(after), func(uid string) bool { return !strings.Contains(before, uid) }) {
		t.Errorf("no new Ironic Pod after its restart (%v): %q, was %q", err, after, before)
	}
	if ok, got := holds(); !ok {
		t.Errorf("after Ironic's restart the leases (%s) have no %s for %s: %s", leases, ip, mac, got)
	} else {
		t.Logf("Ironic restarted (a new Pod): its dnsmasq's leases still hold %s for %s", ip, name)
	}
}

// inspectedAddress is the address inspection saw on a host's NIC (the
// BareMetalHost's hardware details), for a host that takes its address by
// DHCP.
func inspectedAddress(t *testing.T, ctx context.Context, kubectl, name, mac string) string {
	t.Helper()
	out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", adminConf, "-n", "metal3", "get", "bmh", name, "-o", "json").Output()
	if err != nil {
		t.Fatalf("kubectl get bmh %s: %v", name, err)
	}
	var bmh struct {
		Status struct {
			Hardware struct {
				NICs []struct{ MAC, IP string }
			}
		}
	}
	if err := json.Unmarshal(out, &bmh); err != nil {
		t.Fatal(err)
	}
	for _, n := range bmh.Status.Hardware.NICs {
		if strings.EqualFold(n.MAC, mac) && n.IP != "" {
			return n.IP
		}
	}
	t.Fatalf("%s's inspection shows no address on %s: %s", name, mac, out)
	return ""
}

// controlPlaneCPUs is the vCPU count of a test host that runs the
// application cluster's control plane.
const controlPlaneCPUs = 2

// getProvisioning reads the cluster's Provisioning with kubectl.
func getProvisioning(ctx context.Context, kubectl, cluster string) (*bpa.Provisioning, error) {
	out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", adminConf, "-n", "metal3", "get", "provisioning", cluster, "-o", "json").Output()
	if err != nil {
		return nil, err
	}
	var p bpa.Provisioning
	return &p, json.Unmarshal(out, &p)
}

func phase(h bpa.HostStatus, name string) *bpa.Phase {
	for i := range h.Phases {
		if h.Phases[i].Name == name {
			return &h.Phases[i]
		}
	}
	return nil
}

func describe(p *bpa.Provisioning) string {
	if p == nil {
		return "no status"
	}
	b, _ := json.Marshal(p.Status)
	return string(b)
}

// appHost is a host of the application cluster, which the test looks
// into over SSH: its load while kubeadm runs, and its own logs when a wait
// fails.
type appHost struct{ name, ip string }

// waitClusterReady waits until the Provisioning's ClusterReady is True.
// While a host's init or join phase runs, it reads the host's load
// average every 30 s and logs the highest it saw. When it gives up, it
// shows each host's phase and state (the Provisioning's status), the
// BPA's log, and each host's own view: its load, kubeadm's log and the
// kubelet's.
func waitClusterReady(t *testing.T, ctx context.Context, kubectl, cluster, data string, hosts []appHost) *bpa.Provisioning {
	t.Helper()
	return waitProvisioning(t, ctx, kubectl, cluster, data, hosts, "the application cluster Ready", func(p *bpa.Provisioning) bool {
		c := meta.FindStatusCondition(p.Status.Conditions, bpacontroller.ConditionClusterReady)
		return c != nil && c.Status == "True"
	})
}

// waitProvisioning waits (50 minutes at most) until the Provisioning is
// done, as waitClusterReady waits for ClusterReady, and shows the same
// when it gives up.
func waitProvisioning(t *testing.T, ctx context.Context, kubectl, cluster, data string, hosts []appHost, what string, done func(*bpa.Provisioning) bool) *bpa.Provisioning {
	t.Helper()
	var p *bpa.Provisioning
	load := map[string]*loadSamples{}
	var lastSample time.Time
	logs := func() string {
		var b strings.Builder
		fmt.Fprintf(&b, "the BPA:\n%s\n", command.Tail(podLog("bpa-system", "deploy/bpa-operator", ""), 25))
		for _, h := range hosts {
			fmt.Fprintf(&b, "%s (%s), as it sees itself:\n%s\n", h.name, h.ip, hostView(data, h))
		}
		return b.String()
	}
	waitForThen(t, ctx, 50*time.Minute, what, func() (bool, string) {
		var err error
		p, err = getProvisioning(ctx, kubectl, cluster)
		if err != nil {
			return false, err.Error()
		}
		if time.Since(lastSample) > 30*time.Second {
			lastSample = time.Now()
			for _, h := range hosts {
				if hs := hostStatus(p, h.name); hs != nil && kubeadmRunning(*hs) {
					if load[h.name] == nil {
						load[h.name] = &loadSamples{}
					}
					load[h.name].sample(data, h)
				}
			}
		}
		return done(p), describe(p)
	}, logs)
	for _, h := range hosts {
		if l := load[h.name]; l != nil {
			t.Logf("%s's load average while kubeadm ran (%d samples, 30 s apart): 1-minute highest %.2f, mean %.2f; 5-minute highest %.2f", h.name, l.n, l.max1, l.sum1/float64(max(l.n, 1)), l.max5)
		}
	}
	return p
}

// hostStatus is the Provisioning's status of one host.
func hostStatus(p *bpa.Provisioning, name string) *bpa.HostStatus {
	for i := range p.Status.Hosts {
		if p.Status.Hosts[i].Name == name {
			return &p.Status.Hosts[i]
		}
	}
	return nil
}

// kubeadmRunning: the host's init or join phase has started, not ended.
func kubeadmRunning(h bpa.HostStatus) bool {
	for _, name := range []string{bpa.PhaseInit, bpa.PhaseJoin} {
		if ph := phase(h, name); ph != nil && ph.Finished == nil {
			return true
		}
	}
	return false
}

// loadSamples are a host's load averages, read from /proc/loadavg.
type loadSamples struct {
	n                int
	max1, sum1, max5 float64
}

func (l *loadSamples) sample(data string, h appHost) {
	c, err := sshDial(data, h.name, h.ip)
	if err != nil {
		return
	}
	defer c.Close()
	out, err := sshOutput(c, "cat /proc/loadavg")
	var l1, l5 float64
	if err != nil {
		return
	}
	if _, err := fmt.Sscan(out, &l1, &l5); err != nil {
		return
	}
	l.n++
	l.sum1 += l1
	l.max1, l.max5 = max(l.max1, l1), max(l.max5, l5)
}

// hostView is what a host says of itself over SSH: its load, the end of
// kubeadm's log (the BPA's init script writes it) and the kubelet's.
func hostView(data string, h appHost) string {
	c, err := sshDial(data, h.name, h.ip)
	if err != nil {
		return "  (no SSH login: " + err.Error() + ")"
	}
	defer c.Close()
	out, err := sshOutput(c, "echo load: $(cat /proc/loadavg); echo kubeadm:; tail -n 20 /var/log/bootstick-kubeadm-*.log 2>&1; "+
		"echo kubelet:; journalctl -u kubelet --no-pager -n 15 2>&1; echo containers:; crictl ps -a 2>&1 | tail -n 15")
	if err != nil {
		out += "\n(" + err.Error() + ")"
	}
	return command.Tail(command.Redact(out), 70)
}

// phaseTable logs a host's phases, provisioned to Ready, and fails
// unless each of connect, install, made (init, or cleanup and join) and
// ready ended.
func phaseTable(t *testing.T, h bpa.HostStatus, made ...string) {
	t.Helper()
	var table strings.Builder
	fmt.Fprintf(&table, "%s from provisioned to a Ready node (the Provisioning's phases):\n  %-8s %10s\n", h.Name, "PHASE", "TOOK")
	for _, name := range slices.Concat([]string{bpa.PhaseConnect, bpa.PhaseInstall}, made, []string{bpa.PhaseReady}) {
		ph := phase(h, name)
		if ph == nil || ph.Finished == nil {
			t.Errorf("%s: phase %s did not finish: %+v", h.Name, name, h.Phases)
			continue
		}
		fmt.Fprintf(&table, "  %-8s %10s\n", name, ph.Finished.Sub(ph.Started.Time))
	}
	if ready := phase(h, bpa.PhaseReady); h.ProvisionedAt != nil && ready != nil && ready.Finished != nil {
		fmt.Fprintf(&table, "  %-8s %10s (provisioned to Ready)\n", "total", ready.Finished.Sub(h.ProvisionedAt.Time))
	}
	t.Log(table.String())
}

// operatorKubeconfig is the operator's first command: the application
// cluster's kubeconfig from its Secret, written to a file.
func operatorKubeconfig(t *testing.T, ctx context.Context, kubectl, cluster string) ([]byte, string) {
	t.Helper()
	out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", adminConf, "-n", "metal3", "get", "secret", cluster+"-kubeconfig",
		"-o", "jsonpath={.data.value}").Output()
	if err != nil {
		t.Fatalf("kubectl get secret: %v", err)
	}
	conf, err := base64.StdEncoding.DecodeString(string(out))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "app.conf")
	if err := os.WriteFile(path, conf, 0o600); err != nil {
		t.Fatal(err)
	}
	return conf, path
}

// keyBody is a PEM private key's first base64 line: what a leak shows.
func keyBody(pem []byte) string {
	lines := strings.Split(string(pem), "\n")
	if len(lines) > 2 {
		return lines[1]
	}
	return string(pem)
}

// buildStickISO builds the default stick with mkusb into a temporary
// folder (the checkout's lock is copied, never rewritten).
func buildStickISO(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "bin")
	for _, name := range []string{"mkusb", "firstboot"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(bin, name), "./cmd/"+name)
		cmd.Dir = repo
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build ./cmd/%s: %v\n%s", name, err, out)
		}
	}
	lock := filepath.Join(dir, "default.lock")
	if data, err := os.ReadFile(filepath.Join(repo, "bundle", "default.lock")); err == nil {
		if err := os.WriteFile(lock, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	iso := filepath.Join(dir, "bootstick.iso")
	cmd := exec.Command(filepath.Join(bin, "mkusb"), "build", "--bundle", filepath.Join(repo, "bundle", "default.yaml"), "--lock", lock,
		"--cache", cas.DefaultRoot(), "--firstboot", filepath.Join(bin, "firstboot"), "--overlay", filepath.Join(repo, "overlay"), "--output", iso)
	cmd.Dir = repo
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mkusb build: %v\n%s", err, command.Tail(string(out), 30))
	}
	t.Logf("built the stick in %s", time.Since(start).Round(time.Second))
	return iso
}

// checkPulledByDigest: every image the host (at hostIP) runs came from
// the stick's registry by the lock's digest, never by a tag. The install
// ConfigMap lists the hosts' images with the lock's digests; the
// registry's access log shows the host fetching each one's manifest by
// that digest and no manifest by tag; and every pod image (images) is one
// of them, by its tag (kubeadm's static pods) or its digest (flannel).
func checkPulledByDigest(t *testing.T, ctx context.Context, kubectl, data, hostIP string, images map[string]bool) {
	t.Helper()
	out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", adminConf, "get", "configmaps", "-A",
		"--field-selector", "metadata.name="+install.ConfigMapName, "-o", "jsonpath={.items[0].data."+strings.ReplaceAll(install.ConfigKey, ".", `\.`)+"}").Output()
	if err != nil {
		t.Errorf("the install ConfigMap %s: %v", install.ConfigMapName, err)
		return
	}
	cfg, err := install.ParseConfig(string(out))
	if err != nil {
		t.Errorf("the install ConfigMap: %v", err)
		return
	}
	lf, err := os.Open(filepath.Join(data, "registry", "access.log"))
	if err != nil {
		t.Fatal(err)
	}
	byDigest, byTag, err := hostPulls(lf, hostIP)
	lf.Close()
	if err != nil {
		t.Errorf("the registry's access log: %v", err)
	}
	if len(byTag) > 0 {
		t.Errorf("%s fetched %d manifests by tag from the stick's registry, want none: %v", hostIP, len(byTag), byTag)
	}
	var pinned []string
	known := map[string]bool{}
	for _, im := range cfg.Images {
		known[im.Name], known[im.Pinned()] = true, true
		if !byDigest[im.Pinned()] {
			t.Errorf("the registry's access log shows no fetch of %s (%s) by %s", im.Pinned(), im.Name, hostIP)
		}
		pinned = append(pinned, im.Name+" by "+im.Digest[:19])
	}
	for im := range images {
		if !known[im] {
			t.Errorf("a pod runs %s, which is not one of the images the install pulled by digest", im)
		}
	}
	for _, want := range []string{"docker.io/flannel/flannel@sha256:", "registry.k8s.io/kube-apiserver:v1.34.4", "registry.k8s.io/coredns/coredns:v1.12.1"} {
		if !slices.ContainsFunc(slices.Collect(maps.Keys(images)), func(im string) bool { return strings.HasPrefix(im, want) }) {
			t.Errorf("no pod runs %s (images: %v)", want, images)
		}
	}
	if !t.Failed() {
		t.Logf("%s pulled all %d of its images by digest, none by tag (%d manifests by digest): %s", hostIP, len(cfg.Images), len(byDigest), strings.Join(pinned, ", "))
	}
}

// hostPulls reads the registry's access log: the manifests the machine
// at hostIP fetched by digest (registry/repository@sha256:...) and those
// it asked for by tag. The log names a request by tag with its reference
// (the tag) and the digest it served; a request by digest with the digest
// alone.
func hostPulls(log io.Reader, hostIP string) (map[string]bool, []string, error) {
	byDigest := map[string]bool{}
	var byTag []string
	err := registry.ReadAccessLog(log, func(e registry.LogEntry) {
		if e.Kind != "manifest" || e.Status != 200 || !strings.HasPrefix(e.Remote, hostIP+":") {
			return
		}
		switch {
		case e.Reference != "":
			byTag = append(byTag, e.Method+" "+e.NS+"/"+e.Repo+":"+e.Reference)
		case e.Digest != "":
			byDigest[e.NS+"/"+e.Repo+"@"+e.Digest] = true
		}
	})
	return byDigest, byTag, err
}
