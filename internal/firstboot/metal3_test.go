package firstboot

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	metal3 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	"golang.org/x/crypto/ssh"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	bpacontroller "github.com/bootstick/bootstick/internal/bpa/controller"
	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/command"
	"github.com/bootstick/bootstick/internal/hoststate"
	"github.com/bootstick/bootstick/internal/kube"
	"github.com/bootstick/bootstick/internal/kubeadm"
	"github.com/bootstick/bootstick/internal/render"
	"github.com/bootstick/bootstick/internal/sshkeys"
	"github.com/bootstick/bootstick/internal/status"
	"github.com/bootstick/bootstick/internal/testctx"
	"github.com/bootstick/bootstick/internal/vsite"
)

// The virtual site of the provisioning test: this machine's end of the
// veth (bsprov0, 172.22.0.1), the BMCs and the machines in a network
// namespace the test makes (internal/vsite).
const (
	m3Netns   = "bootstick-test-prov"
	m3Iface   = "bsprov0"
	m3Address = "172.22.0.1"
	m3BMC     = "172.22.0.2"
	m3HostIP  = "172.22.0.50"
	// m3UEFIHostIP is the UEFI host's static address, m3RedfishHostIP
	// the Redfish host's.
	m3UEFIHostIP    = "172.22.0.51"
	m3RedfishHostIP = "172.22.0.52"
	// m3VMediaHostIP is the virtual-media host's, and its only address:
	// DHCP never answers it.
	m3VMediaHostIP = "172.22.0.53"
	m3VMediaMAC    = "52:54:00:b0:07:1a"
)

// TestHostProvision is Journey A: firstboot in host mode with a site of
// virtual hosts (QEMU under TCG, each with a virtualbmc BMC that Ironic
// drives over IPMI). node-0 (SeaBIOS, legacy) goes registering →
// inspecting → available → provisioning → provisioned: it PXE-boots the
// deploy ramdisk from Ironic's DHCP, TFTP and HTTP, gets the compute
// image written to its disk, boots it, and cloud-init applies the user
// data and the network data; an SSH login with firstboot's key shows the
// site's hostname and address. node-uefi does the same in parallel as a
// real server does: UEFI firmware (OVMF) with two NICs, their option ROMs
// off, so that the firmware's own PXE client loads snponly.efi over TFTP
// (its console shows it). node-uefi-redfish is the same machine behind a
// Redfish BMC (vsite's, HTTPS with a certificate of the site's BMC CA,
// which the site file names and Ironic verifies). node-uefi-vmedia boots
// by virtual media on the same kind of BMC, on a network where DHCP never
// answers it: its BMC mounts the ISO Ironic builds, OVMF boots the CD, and
// the deploy ramdisk takes its address from the network data on the ISO.
// Beside them, five hosts
// fail as a person would get them wrong — a BMC that does not answer, a
// wrong BMC password (IPMI and Redfish), an OS image checksum that does
// not match, a boot MAC that matches no NIC — and the run's log
// and status say so in words. firstboot is killed during the site step: the next run
// goes on following the hosts and creates nothing twice. Ironic and BMO
// never restart; no password reaches firstboot's output, state or status.
func TestHostProvision(t *testing.T) {
	if testing.Short() {
		t.Skip("brings up a real node with Ironic and the baremetal-operator on this host and provisions a QEMU machine through virtualbmc (root, make toolchain)")
	}
	tc := toolchainDir(t)
	files := filepath.Join(filepath.Dir(filepath.Join(tc, "oci")), "files")
	for _, f := range []string{"ironic-python-agent.kernel", "ironic-python-agent.initramfs", "debian-13-compute.qcow2"} {
		if _, err := os.Stat(filepath.Join(files, f)); err != nil {
			t.Fatalf("%v: run make toolchain first", err)
		}
	}
	h := newHostRun(t, tc)
	ctx, cancel := testctx.New(t, 75*time.Minute)
	defer cancel()

	pw := func() string { return "bmc-" + randomHex(t, 6) }
	machines := []vsite.Machine{
		{Name: "node-0", MAC: "52:54:00:b0:07:10", BMCPort: 6230, BMCUser: "admin", BMCPassword: pw()},
		{Name: "node-badpass", MAC: "52:54:00:b0:07:11", BMCPort: 6231, BMCUser: "admin", BMCPassword: pw(), MemoryMiB: 256},
		{Name: "node-badsum", MAC: "52:54:00:b0:07:13", BMCPort: 6232, BMCUser: "admin", BMCPassword: pw()},
		{Name: "node-badmac", MAC: "52:54:00:b0:07:14", BMCPort: 6233, BMCUser: "admin", BMCPassword: pw(), MemoryMiB: 512},
		{Name: "node-uefi", MAC: "52:54:00:b0:07:16", BMCPort: 6234, BMCUser: "admin", BMCPassword: pw(),
			Firmware: vsite.FirmwareUEFI, ExtraMACs: []string{"52:54:00:b0:17:16"}},
		{Name: "node-uefi-redfish", MAC: "52:54:00:b0:07:18", BMCPort: 8443, BMC: vsite.BMCRedfish, BMCUser: "admin", BMCPassword: pw(),
			Firmware: vsite.FirmwareUEFI, ExtraMACs: []string{"52:54:00:b0:17:18"}},
		{Name: "node-uefi-vmedia", MAC: m3VMediaMAC, BMCPort: 8445, BMC: vsite.BMCRedfishVirtualMedia, BMCUser: "admin", BMCPassword: pw(),
			Firmware: vsite.FirmwareUEFI},
		{Name: "node-redfish-badpass", MAC: "52:54:00:b0:07:19", BMCPort: 8444, BMC: vsite.BMCRedfish, BMCUser: "admin", BMCPassword: pw(),
			Firmware: vsite.FirmwareUEFI, MemoryMiB: 256},
	}
	// The hosts that provision: each shape's firmware and BMC, as the
	// BareMetalHost, Ironic's node and status name them.
	good := []struct {
		name, ip, bmc, bootMode, ironicMode, boot string
	}{
		{"node-0", m3HostIP, "ipmi", "legacy", "bios", "ipxe"},
		{"node-uefi", m3UEFIHostIP, "ipmi", "UEFI", "uefi", "ipxe"},
		{"node-uefi-redfish", m3RedfishHostIP, "redfish", "UEFI", "uefi", "ipxe"},
		{"node-uefi-vmedia", m3VMediaHostIP, "redfish", "UEFI", "uefi", "redfish-virtual-media"},
	}
	vs := startSite(t, ctx, machines)

	sum, _, err := cas.HashFile(filepath.Join(files, "debian-13-compute.qcow2"))
	if err != nil {
		t.Fatal(err)
	}
	wrongPassword := pw()
	sitePath := writeSite(t, vs, vsite.SiteConfig{
		Cluster: "provision-test",
		// Its hosts are all masters: a site of three or more names the
		// control plane's VIP.
		ControlPlaneVIP: "172.22.0.99",
		Image: vsite.SiteImage{
			URL:      fmt.Sprintf("http://%s:%d/images/debian-13-compute.qcow2", m3Address, render.ImagePort),
			Checksum: sum.Hex(), Format: "qcow2",
		},
		Hosts: []vsite.SiteHost{
			{Machine: "node-0", Address: netip.MustParseAddr(m3HostIP)},
			{Machine: "node-badpass", BMCPassword: wrongPassword},
			{Machine: "node-nobmc", BMCAddress: fmt.Sprintf("ipmi://%s:6239", m3BMC), BMCPassword: pw(), BootMAC: "52:54:00:b0:07:12"},
			{Machine: "node-badsum", Image: &vsite.SiteImage{URL: fmt.Sprintf("http://%s:%d/images/debian-13-compute.qcow2", m3Address, render.ImagePort),
				Checksum: strings.Repeat("0", 64), Format: "qcow2"}},
			{Machine: "node-badmac", BootMAC: "52:54:00:b0:07:15"}, // its NIC is :14
			{Machine: "node-uefi", Address: netip.MustParseAddr(m3UEFIHostIP)},
			{Machine: "node-uefi-redfish", Address: netip.MustParseAddr(m3RedfishHostIP)},
			{Machine: "node-uefi-vmedia", Address: netip.MustParseAddr(m3VMediaHostIP)},
			{Machine: "node-redfish-badpass", BMCPassword: wrongPassword},
		},
	})
	var outputs []string
	startRun := func(name string) (*exec.Cmd, string) {
		logPath := filepath.Join(t.TempDir(), name+".log")
		f, err := os.Create(logPath)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		run := h.cmd("run", "--mode", "host", "--bundle", filepath.Join(tc, "oci"), "--data", h.data, "--site", sitePath)
		// The host whose boot MAC matches no NIC fails its inspection when
		// Ironic's timeout ends: 5 minutes here, 30 by default.
		run.Env = append(run.Env, testIronicEnvVar+"=300")
		run.Stdout, run.Stderr = f, f
		if err := run.Start(); err != nil {
			t.Fatal(err)
		}
		outputs = append(outputs, logPath)
		return run, logPath
	}
	readLog := func(p string) string {
		data, _ := os.ReadFile(p)
		return string(data)
	}

	// The first run: up to the site step, and until node-0 is inspecting.
	first, firstLog := startRun("run-1")
	exited := make(chan error, 1)
	go func() { exited <- first.Wait() }()
	var c *kube.Client
	watch := &hostWatch{last: map[string]hoststate.Host{}}
	waitFor(t, ctx, 30*time.Minute, "node-0 inspecting in the first run", func() (bool, string) {
		select {
		case err := <-exited:
			t.Fatalf("the first run ended before node-0 was inspecting: %v\n%s", err, command.Tail(readLog(firstLog), 40))
		default:
		}
		if c == nil {
			if cc, err := kube.Load(adminConf); err == nil {
				c = cc
			}
			return false, "no cluster yet"
		}
		states := watch.look(ctx, c)
		return states["node-0"].State == "inspecting", fmt.Sprint(states["node-0"])
	})
	uids := bmhUIDs(t, ctx, c)
	// Ironic offers what BMO needs.
	if v := ironicMaxVersion(t); apiMinor(v) < bmoBaseline {
		t.Errorf("Ironic offers API %s, want 1.%d or newer (the baremetal-operator's baseline)", v, bmoBaseline)
	}
	first.Process.Kill()
	<-exited
	t.Logf("killed firstboot during the site step (node-0 inspecting)")

	// The second run goes on following the hosts to their end.
	second, secondLog := startRun("run-2")
	go func() { exited <- second.Wait() }()
	var runErr error
	waitFor(t, ctx, 45*time.Minute, "the second run to end", func() (bool, string) {
		states := watch.look(ctx, c)
		select {
		case runErr = <-exited:
			return true, ""
		default:
		}
		return false, fmt.Sprint(states["node-0"])
	})
	out := readLog(secondLog)
	if runErr != nil {
		t.Fatalf("the second run: %v\n%s\nIronic:\n%s", runErr, command.Tail(out, 40), command.Tail(ironicLog(), 30))
	}
	if got := bmhUIDs(t, ctx, c); fmt.Sprint(got) != fmt.Sprint(uids) {
		t.Errorf("the second run made the BareMetalHosts again: UIDs %v, then %v", uids, got)
	}
	if !strings.Contains(out, "4 of 9 hosts provisioned") {
		t.Errorf("the second run did not log 4 of 9 hosts provisioned:\n%s", command.Tail(out, 30))
	}
	// Each fault is named, with what to do, in the run's log.
	for name, want := range map[string]string{"node-badsum": "image.checksum", "node-badmac": "bootMACAddress",
		"node-badpass": "registration error", "node-nobmc": "registration error", "node-redfish-badpass": "registration error"} {
		if !regexp.MustCompile(`host failed.* name=` + name + ` .*` + regexp.QuoteMeta(want)).MatchString(out) {
			t.Errorf("the run's log does not say %s failed with %q:\n%s", name, want, command.Tail(out, 30))
		}
	}
	// The operator's own record: registered, inspected (then available
	// until provisioning started), provisioned, in that order.
	for _, hs := range good {
		historyTable(t, hs.name, watch.last[hs.name].History)
	}
	// The appliance's controllers ride out a slow API server.
	checkLeaderElection(t, ctx, c.CS, "kube-system/kube-controller-manager", "kube-system/kube-scheduler",
		render.BMONamespace+"/baremetal-operator", "bpa-system/"+bpacontroller.LeaderElectionID)

	// Each host boots its own disk; cloud-init gave it the site's name,
	// address and firstboot's key.
	for _, hs := range good {
		hostname, addrs := sshRun(t, ctx, h.data, hs.name, hs.ip, vs.SerialLog(hs.name))
		if hostname != hs.name {
			t.Errorf("%s calls itself %q", hs.name, hostname)
		}
		if !strings.Contains(addrs, hs.ip+"/24") {
			t.Errorf("ip addr on %s shows no %s/24:\n%s", hs.name, hs.ip, addrs)
		}
	}
	// Each host's serial console, as text.
	consoles := map[string]string{}
	for _, hs := range good {
		console, err := vs.Console(hs.name)
		if err != nil {
			t.Fatal(err)
		}
		consoles[hs.name] = console
	}
	// Each shape's boot on its serial console: the UEFI hosts' firmware's
	// own PXE client (the NICs' option ROMs are off) loading snponly.efi;
	// the virtual-media host's OVMF booting the CD its BMC mounted, and its
	// deploy ramdisk taking its address from the CD's network data. DHCP
	// never heard from it.
	for _, hs := range good {
		m := machines[slices.IndexFunc(machines, func(m vsite.Machine) bool { return m.Name == hs.name })]
		lines, err := vsite.BootEvidence(m, hs.ip, consoles[hs.name])
		if err != nil {
			t.Error(err)
		}
		for _, l := range lines {
			t.Logf("%s's console: %s", hs.name, l)
		}
	}
	dnsmasq := podLog(render.IronicNamespace, "deploy/ironic", "dnsmasq")
	if !strings.Contains(strings.ToLower(dnsmasq), "52:54:00:b0:07:10") {
		t.Errorf("dnsmasq's log shows no DHCP of node-0 (52:54:00:b0:07:10), so it cannot show the virtual-media host's absence:\n%s", command.Tail(dnsmasq, 20))
	}
	if strings.Contains(strings.ToLower(dnsmasq), m3VMediaMAC) {
		t.Errorf("dnsmasq's log shows DHCP from the virtual-media host (%s):\n%s", m3VMediaMAC, command.Tail(dnsmasq, 40))
	}

	// The deploy ramdisk booted under TCG and the agent found its node
	// through Ironic's lookup API: its own line on each host's console.
	// Ironic drove each in the boot mode the site gave, by iPXE.
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	api := ironicAsBMO(t, ctx, c)
	for _, hs := range good {
		name, bmc, mode, boot := hs.name, hs.bmc, hs.ironicMode, hs.boot
		serial := consoles[name]
		id := bmhProvisioningID(ctx, dyn, name)
		if id == "" {
			t.Errorf("%s's BareMetalHost names no Ironic node", name)
			continue
		}
		// The agent syncs the clock with hwclock (util-linux-extra).
		if strings.Contains(serial, "No such file or directory: 'hwclock'") {
			t.Errorf("%s's deploy ramdisk has no hwclock: the agent's clock step failed", name)
		}
		if line := regexp.MustCompile(`.*Lookup succeeded, node UUID is ` + regexp.QuoteMeta(id) + `.*`).FindString(serial); line == "" {
			t.Errorf("%s's console has no \"Lookup succeeded, node UUID is %s\" from the agent:\n%s", name, id, command.Tail(serial, 30))
		} else {
			t.Logf("%s's console: %s", name, strings.TrimSpace(line))
		}
		// BMO gives the node its boot mode as a capability.
		var node struct {
			Driver        string `json:"driver"`
			BootInterface string `json:"boot_interface"`
			Properties    struct {
				Capabilities string `json:"capabilities"`
			} `json:"properties"`
		}
		if err := api.do(ctx, http.MethodGet, "/v1/nodes/"+id, nil, &node); err != nil {
			t.Errorf("Ironic's node of %s: %v", name, err)
		} else if caps := node.Properties.Capabilities; node.Driver != bmc || node.BootInterface != boot ||
			!strings.Contains(","+caps+",", ",boot_mode:"+mode+",") {
			t.Errorf("Ironic drives %s with %s, boot interface %s, capabilities %q; want %s, %s, boot_mode:%s", name, node.Driver, node.BootInterface, caps, bmc, boot, mode)
		} else {
			t.Logf("Ironic drives %s with %s, boot interface %s, capabilities %s", name, node.Driver, node.BootInterface, caps)
		}
	}

	// Status: each host's state, time in it, and the faults in words.
	rep, sout := h.statusJSON()
	byName := map[string]status.Host{}
	for _, hs := range rep.Hosts {
		byName[hs.Name] = hs
	}
	// Each shape provisioned, and how Ironic drives it: SeaBIOS and OVMF
	// behind virtualbmc, OVMF behind a Redfish BMC.
	for _, g := range good {
		hs := byName[g.name]
		if hs.State != "provisioned" || hs.SecondsInState <= 0 || hs.Error != "" {
			t.Errorf("status shows %s as %+v, want provisioned with its time in state and no error", g.name, hs)
		}
		if hs.BMCType != g.bmc || hs.BootMode != g.bootMode || hs.BootInterface != g.boot {
			t.Errorf("status shows %s driven as %s, %s/%s; want %s, %s/%s", g.name, hs.BMCType, hs.BootMode, hs.BootInterface, g.bmc, g.bootMode, g.boot)
		}
	}
	for name, want := range map[string][2]string{
		"node-badpass":         {"registration error", "answers but refuses the user name or password: check the host's bmc.credentials"},
		"node-nobmc":           {"registration error", "nothing answers at ipmi://172.22.0.2:6239: check the host's bmc.address"},
		"node-badsum":          {"provisioning error", "the OS image's checksum does not match the image: check image.checksum"},
		"node-badmac":          {"inspection error", "check that its bootMACAddress is the NIC on the provisioning network"},
		"node-redfish-badpass": {"registration error", "answers but refuses the user name or password: check the host's bmc.credentials"},
	} {
		if hs := byName[name]; hs.ErrorType != want[0] || !strings.Contains(hs.Reason, want[1]) {
			t.Errorf("status shows %s as %+v, want a %s whose reason says %q", name, hs, want[0], want[1])
		}
	}
	human, err := h.cmd("status", "--data", h.data).Output()
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	t.Logf("firstboot status:\n%s", human)

	// Ironic and BMO ran the whole journey without a restart.
	for _, d := range []struct{ ns, name string }{{render.IronicNamespace, "ironic"}, {render.BMONamespace, "baremetal-operator"}} {
		w, err := c.DeploymentState(ctx, d.ns, d.name)
		if err != nil {
			t.Fatal(err)
		}
		if !w.Ready || w.Restarts != 0 {
			t.Errorf("%s/%s: ready %v, %d restarts (%s)", d.ns, d.name, w.Ready, w.Restarts, w.Detail)
		}
	}

	// No password anywhere a person or a log can read.
	ironicPW, err := c.CS.CoreV1().Secrets(render.BMONamespace).Get(ctx, render.IronicCredentials, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secrets := map[string]string{"Ironic's password": string(ironicPW.Data["password"]), "the wrong BMC password": wrongPassword}
	for _, m := range machines {
		secrets[m.Name+"'s BMC password"] = m.BMCPassword
	}
	texts := map[string]string{"status --json": string(sout), "status": string(human), "Ironic's log": ironicLog(),
		"BMO's log": podLog(render.BMONamespace, "deploy/baremetal-operator", "")}
	for _, p := range outputs {
		texts[p] = readLog(p)
	}
	for what, secret := range secrets {
		if len(secret) < 8 {
			t.Fatalf("%s is too short to look for", what)
		}
		for name, text := range texts {
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

// startSite starts the test's virtual site (internal/vsite) with machines,
// and closes it when the test ends.
func startSite(t testing.TB, ctx context.Context, machines []vsite.Machine) *vsite.Site {
	t.Helper()
	vs, err := vsite.Start(ctx, vsite.Options{
		Dir: t.TempDir(), Netns: m3Netns, HostIface: m3Iface,
		Network: netip.MustParsePrefix("172.22.0.0/24"), HostAddr: netip.MustParseAddr(m3Address), BMCAddr: netip.MustParseAddr(m3BMC),
		Machines: machines,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := vs.Close(); err != nil {
			t.Error(err)
		}
	})
	return vs
}

// writeSite writes the site file of c (with the test's DHCP range unless
// c has one) and
// returns its path.
func writeSite(t testing.TB, vs *vsite.Site, c vsite.SiteConfig) string {
	t.Helper()
	if !c.DHCPStart.IsValid() {
		c.DHCPStart, c.DHCPEnd = netip.MustParseAddr("172.22.0.10"), netip.MustParseAddr("172.22.0.40")
	}
	data, err := vs.SiteFile(c)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "site.yaml")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// hostWatch keeps the last states read of the BareMetalHosts.
type hostWatch struct{ last map[string]hoststate.Host }

// look reads the hosts' states; on a failed read, the last ones stay.
func (w *hostWatch) look(ctx context.Context, c *kube.Client) map[string]hoststate.Host {
	if c == nil {
		return w.last
	}
	if states, err := hoststate.List(ctx, c); err == nil {
		for _, s := range states {
			w.last[s.Name] = s
		}
	}
	return w.last
}

// historyTable logs a host's time in each state from the operator's
// operation history, and fails unless the host went registering →
// inspecting → available → provisioning → provisioned in that order.
func historyTable(t *testing.T, name string, h metal3.OperationHistory) {
	t.Helper()
	rows := []struct {
		state      string
		start, end time.Time
	}{
		{"registering", h.Register.Start.Time, h.Register.End.Time},
		{"inspecting", h.Inspect.Start.Time, h.Inspect.End.Time},
		{"available", h.Inspect.End.Time, h.Provision.Start.Time},
		{"provisioning", h.Provision.Start.Time, h.Provision.End.Time},
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s's time in each state (the baremetal-operator's operation history):\n  %-14s %10s\n", name, "STATE", "FOR")
	prev := rows[0].start
	for _, r := range rows {
		if r.start.IsZero() || r.end.IsZero() || r.end.Before(r.start) || r.start.Before(prev) {
			t.Errorf("%s did not go through %s in order: %v to %v (history %+v)", name, r.state, r.start, r.end, h)
		}
		prev = r.end
		fmt.Fprintf(&b, "  %-14s %10s\n", r.state, r.end.Sub(r.start).Round(time.Second))
	}
	fmt.Fprintf(&b, "  %-14s %10s\n", "registering to provisioned", h.Provision.End.Sub(h.Register.Start.Time).Round(time.Second))
	t.Log(b.String())
}

// waitFor polls cond every 2 s until it holds; what names the wait. It
// gives up after timeout or when ctx ends (the test's deadline, from
// testctx), whichever comes first, and fails in words: how long it waited
// and why it stopped, cond's last word, and the tails of Ironic's and
// BMO's logs.
func waitFor(t *testing.T, ctx context.Context, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	waitForThen(t, ctx, timeout, what, cond, metal3Logs)
}

// checkLeaderElection checks that each controller's Lease (namespace/name)
// lasts what kubeadm.LeaderElectionLeaseDuration says, so that a slow API
// server does not restart the controller.
func checkLeaderElection(t *testing.T, ctx context.Context, cs kubernetes.Interface, leases ...string) {
	t.Helper()
	want := int32(kubeadm.LeaderElectionLeaseDuration / time.Second)
	ok := true
	for _, l := range leases {
		ns, name, _ := strings.Cut(l, "/")
		lease, err := cs.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
		switch {
		case err != nil:
			t.Errorf("the leader Lease %s: %v", l, err)
		case lease.Spec.LeaseDurationSeconds == nil:
			t.Errorf("the leader Lease %s names no duration, want %d s", l, want)
		case *lease.Spec.LeaseDurationSeconds != want:
			t.Errorf("the leader Lease %s lasts %d s, want %d s", l, *lease.Spec.LeaseDurationSeconds, want)
		default:
			continue
		}
		ok = false
	}
	if ok {
		t.Logf("the leader Leases last %d s: %s", want, strings.Join(leases, ", "))
	}
}

// metal3Logs are the last lines of Ironic's and BMO's logs.
func metal3Logs() string {
	return "Ironic:\n" + command.Tail(ironicLog(), 25) + "\nBMO:\n" + command.Tail(podLog(render.BMONamespace, "deploy/baremetal-operator", ""), 25)
}

// waitForThen is waitFor with the logs a failure shows.
func waitForThen(t *testing.T, ctx context.Context, timeout time.Duration, what string, cond func() (bool, string), logs func() string) {
	t.Helper()
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		ok, last := cond()
		if ok {
			return
		}
		select {
		case <-wctx.Done():
			why := fmt.Sprintf("its limit is %s", timeout)
			if ctx.Err() != nil {
				why = "the test's own deadline came first (testctx: go test's -timeout is near)"
			}
			t.Fatalf("gave up waiting for %s after %s: %s\nlast: %s\n%s", what, time.Since(start).Round(time.Second), why, last, logs())
		case <-tick.C:
		}
	}
}

// bmhUIDs are the BareMetalHosts' UIDs by name.
func bmhUIDs(t *testing.T, ctx context.Context, c *kube.Client) map[string]string {
	t.Helper()
	states, err := hoststate.List(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, s := range states {
		out[s.Name] = s.UID
	}
	if len(out) != 9 {
		t.Fatalf("%d BareMetalHosts, want 9: %v", len(out), out)
	}
	return out
}

// sshRun logs in to the host as root with firstboot's key (the user data
// keeps root's login open), accepting only the host key firstboot made for
// the host (cloud-init installs it from the user data), and returns its
// hostname and ip addr.
func sshRun(t *testing.T, ctx context.Context, data, name, ip, serial string) (string, string) {
	t.Helper()
	var client *ssh.Client
	var lastErr error
	waitFor(t, ctx, 15*time.Minute, "an SSH login to "+ip, func() (bool, string) {
		client, lastErr = sshDial(data, name, ip)
		if lastErr != nil {
			serialLog, _ := os.ReadFile(serial)
			return false, lastErr.Error() + "\nconsole:\n" + command.Tail(string(serialLog), 20)
		}
		return true, ""
	})
	defer client.Close()
	run := func(cmd string) string {
		out, err := sshOutput(client, cmd)
		if err != nil {
			t.Fatalf("ssh %s %q: %v\n%s", ip, cmd, err, out)
		}
		return out
	}
	return run("hostname"), run("ip -o addr")
}

// sshDial logs in to the host as root with firstboot's key, accepting only
// the host key firstboot made for it.
func sshDial(data, name, ip string) (*ssh.Client, error) {
	keyPEM, err := os.ReadFile(filepath.Join(data, "ssh", sshkeys.PrivateKeyFile))
	if err != nil {
		return nil, err
	}
	signer, err := ssh.ParsePrivateKey(keyPEM)
	if err != nil {
		return nil, err
	}
	hostPub, err := os.ReadFile(filepath.Join(data, "ssh", sshkeys.HostKeysDir, name, sshkeys.PublicKeyFile))
	if err != nil {
		return nil, err
	}
	hostKey, _, _, _, err := ssh.ParseAuthorizedKey(hostPub)
	if err != nil {
		return nil, err
	}
	cfg := &ssh.ClientConfig{User: "root", Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: ssh.FixedHostKey(hostKey), HostKeyAlgorithms: []string{hostKey.Type()}, Timeout: 10 * time.Second}
	return ssh.Dial("tcp", net.JoinHostPort(ip, "22"), cfg)
}

// sshOutput runs cmd in a new session and returns its standard output.
func sshOutput(client *ssh.Client, cmd string) (string, error) {
	sess, err := client.NewSession()
	if err != nil {
		return "", err
	}
	defer sess.Close()
	var stdout, stderr strings.Builder
	sess.Stdout, sess.Stderr = &stdout, &stderr
	if err := sess.Run(cmd); err != nil {
		return stdout.String(), fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(stdout.String()), nil
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

func ironicLog() string {
	return podLog(render.IronicNamespace, "deploy/ironic", "ironic")
}

// podLog is a workload's log (kubectl logs), of one container when
// container is set, with more of kubectl's flags (--previous). It gives
// up after 30 s: a failing test's cluster may not answer.
func podLog(ns, what, container string, flags ...string) string {
	args := append([]string{"--kubeconfig", adminConf, "--request-timeout", "30s", "-n", ns, "logs", what}, flags...)
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
func newHostRun(t testing.TB, tc string) *hostRun {
	t.Helper()
	hostModeLock(t)
	h := &hostRun{t: t, bin: buildFirstboot(t), tc: tc, data: "/var/lib/bootstick-test"}
	ctx, cancel := context.WithCancel(context.Background()) // a benchmark (testing.B) has no deadline
	if tt, ok := t.(testctx.T); ok {
		cancel()
		ctx, cancel = testctx.New(tt, 24*time.Hour)
	}
	h.ctx = ctx
	t.Cleanup(func() {
		cancel()
		// The reset has a context of its own: the test's has ended. It
		// fits in testctx.Reserve.
		rctx, rcancel := context.WithTimeout(context.Background(), testctx.Reserve-time.Minute)
		defer rcancel()
		out, err := firstbootCmd(rctx, h.bin, "reset", "--data", h.data).CombinedOutput()
		if err != nil {
			t.Errorf("reset: %v\n%s", err, out)
		}
		checkNothingLeft(t, h.data)
	})
	return h
}

// hostModeLock holds the machine-wide lock of the host-mode tests: one
// host-mode node per machine.
func hostModeLock(t testing.TB) {
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
func buildFirstboot(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "firstboot")
	if out, err := exec.Command("go", "build", "-tags", "bootsticktest", "-o", bin, "github.com/bootstick/bootstick/cmd/firstboot").CombinedOutput(); err != nil {
		t.Fatalf("building firstboot: %v\n%s", err, out)
	}
	return bin
}
