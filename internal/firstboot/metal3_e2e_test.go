//go:build e2e

package firstboot

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	bpacontroller "github.com/bootstick/bootstick/internal/bpa/controller"
	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/command"
	"github.com/bootstick/bootstick/internal/hoststate"
	"github.com/bootstick/bootstick/internal/kube"
	"github.com/bootstick/bootstick/internal/render"
	"github.com/bootstick/bootstick/internal/status"
	"github.com/bootstick/bootstick/internal/testctx"
	"github.com/bootstick/bootstick/internal/vsite"
)

// The static addresses of Journey A's hosts on the provisioning network.
const (
	m3HostIP = "172.22.0.50"
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
// answers it, with Secure Boot on (UEFISecureBoot): its BMC mounts the ISO
// Ironic builds, OVMF boots the CD's signed chain, the deploy ramdisk's
// kernel says Secure Boot is on and the ramdisk takes its address from the
// network data on the ISO; its own OS's mokutil says Secure Boot is on.
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
			Firmware: vsite.FirmwareUEFISecureBoot},
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
		{"node-uefi-vmedia", m3VMediaHostIP, "redfish", "UEFISecureBoot", "uefi", "redfish-virtual-media"},
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
		// Ironic's timeout ends: 15 minutes here (six TCG guests boot their
		// deploy ramdisks at once on two cores), 30 by default.
		run.Env = append(run.Env, testIronicEnvVar+"=900")
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
	// The Secure Boot host's instance says Secure Boot is on, as an
	// operator asks it (mokutil comes with shim).
	for _, hs := range good {
		cmds := []string{"hostname", "ip -o addr"}
		if hs.bootMode == "UEFISecureBoot" {
			cmds = append(cmds, "mokutil --sb-state")
		}
		out := sshRun(t, ctx, h.data, hs.name, hs.ip, vs.SerialLog(hs.name), cmds...)
		if out[0] != hs.name {
			t.Errorf("%s calls itself %q", hs.name, out[0])
		}
		if !strings.Contains(out[1], hs.ip+"/24") {
			t.Errorf("ip addr on %s shows no %s/24:\n%s", hs.name, hs.ip, out[1])
		}
		if len(out) > 2 {
			if !strings.Contains(out[2], "SecureBoot enabled") {
				t.Errorf("mokutil --sb-state on %s: %q, want SecureBoot enabled", hs.name, out[2])
			} else {
				t.Logf("mokutil --sb-state on %s: %s", hs.name, out[2])
			}
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
		// A Secure Boot host's capabilities ask for it, and Ironic
		// read the BMC's SecureBoot after it set it (node.secure_boot).
		var node struct {
			Driver        string `json:"driver"`
			BootInterface string `json:"boot_interface"`
			SecureBoot    *bool  `json:"secure_boot"`
			Properties    struct {
				Capabilities string `json:"capabilities"`
			} `json:"properties"`
		}
		sb := hs.bootMode == "UEFISecureBoot"
		if err := api.do(ctx, http.MethodGet, "/v1/nodes/"+id, nil, &node); err != nil {
			t.Errorf("Ironic's node of %s: %v", name, err)
		} else if caps := node.Properties.Capabilities; node.Driver != bmc || node.BootInterface != boot ||
			!strings.Contains(","+caps+",", ",boot_mode:"+mode+",") || strings.Contains(","+caps+",", ",secure_boot:true,") != sb ||
			(sb && (node.SecureBoot == nil || !*node.SecureBoot)) {
			t.Errorf("Ironic drives %s with %s, boot interface %s, capabilities %q, secure_boot %s; want %s, %s, boot_mode:%s, Secure Boot %v",
				name, node.Driver, node.BootInterface, caps, optBool(node.SecureBoot), bmc, boot, mode, sb)
		} else {
			t.Logf("Ironic drives %s with %s, boot interface %s, capabilities %s, secure_boot %s", name, node.Driver, node.BootInterface, caps, optBool(node.SecureBoot))
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
	// Nor the virtual-media ISOs' secret path (a capability: the ISO
	// holds its node's agent token), which the Secure Boot host's BMC
	// fetched its ISO under.
	vmedia, err := c.CS.CoreV1().Secrets(render.IronicNamespace).Get(ctx, render.IronicVMedia, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secrets := map[string]string{"Ironic's password": string(ironicPW.Data["password"]), "the wrong BMC password": wrongPassword,
		"the virtual-media path": string(vmedia.Data["path"])}
	for _, m := range machines {
		secrets[m.Name+"'s BMC password"] = m.BMCPassword
	}
	texts := map[string]string{"status --json": string(sout), "status": string(human), "Ironic's log": ironicLog(),
		"BMO's log":            podLog(render.BMONamespace, "deploy/baremetal-operator", ""),
		"the web server's log": podLog(render.IronicNamespace, "deploy/ironic", "httpd")}
	if httpd := texts["the web server's log"]; !strings.Contains(httpd, "(a virtual-media image)") {
		t.Errorf("the web server's log shows no fetch of a virtual-media ISO:\n%s", command.Tail(httpd, 20))
	}
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

// optBool is an optional field of Ironic's as JSON shows it.
func optBool(b *bool) string {
	if b == nil {
		return "null"
	}
	return fmt.Sprint(*b)
}
