package vsite

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/bootstick/bootstick/internal/bmcprobe"
	"github.com/bootstick/bootstick/internal/testctx"
)

// TestRedfishBMCDrivesTheMachine starts a site of one small UEFI machine
// with a Redfish BMC and makes the calls Ironic makes through sushy, over
// HTTPS from this machine to the BMC inside the namespace, trusting the
// site's CA: power on starts the QEMU machine, a Cd boot override puts
// the CD-ROM first in its definition, InsertMedia puts the image in its
// CD-ROM drive and EjectMedia takes it out, ForceOff stops it; a wrong
// password is refused. The BMC has an address of its own, which its
// certificate names. The machine's POST (its boot menu's wait) stays in
// its definition through every override, and the BMC's log shows each
// request and no secret.
func TestRedfishBMCDrivesTheMachine(t *testing.T) {
	if testing.Short() {
		t.Skip("starts libvirtd and a QEMU machine with OVMF (root)")
	}
	ctx, cancel := testctx.New(t, 5*time.Minute)
	defer cancel()
	m := Machine{Name: "vsite-rf-0", MAC: "52:54:00:b0:0f:01", ExtraMACs: []string{"52:54:00:b0:0f:02"},
		BMCAddr: netip.MustParseAddr("172.25.0.3"), BMCPort: 6250,
		BMCUser: "admin", BMCPassword: "pw-vsite-rf", MemoryMiB: 256, CPUs: 1, DiskGiB: 8,
		Firmware: FirmwareUEFISecureBoot, BMC: BMCRedfishVirtualMedia, POST: 2 * time.Second}
	dir := t.TempDir()
	s := startTestSite(t, ctx, Options{
		Dir: dir, Netns: "bootstick-test-vsite-rf", HostIface: "bsvr0",
		Network: netip.MustParsePrefix("172.25.0.0/24"), HostAddr: netip.MustParseAddr("172.25.0.1"), BMCAddr: netip.MustParseAddr("172.25.0.2"),
		Machines: []Machine{m},
	})
	if got, want := s.BMCAddress(m), "redfish-virtualmedia+https://172.25.0.3:6250/redfish/v1/Systems/vsite-rf-0"; got != want {
		t.Errorf("BMC address %s, want %s", got, want)
	}
	if pem, err := os.ReadFile(s.BMCCAFile()); err != nil || !bytes.Equal(pem, s.BMCCA()) {
		t.Errorf("the CA file %s is not BMCCA: %v", s.BMCCAFile(), err)
	}
	if r, err := bmcprobe.Probe(ctx, s.BMCAddress(m), 5*time.Second); r != bmcprobe.Answers {
		t.Errorf("the BMC does not answer a probe: %v %v", r, err)
	}
	if _, err := os.Stat(dir + "/vbmcd.pid"); err == nil {
		t.Error("vbmcd runs for a site with no IPMI machine")
	}

	drv := &libvirtMachine{s: s, m: s.opts.Machines[0]}
	state := func() machineState {
		st, err := drv.State(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	domstate := func() string {
		st, err := s.PowerState(ctx, m.Name)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	// cdrom is the CD-ROM drive's element in the domain's XML, as virsh
	// prints it.
	cdrom := func(args ...string) string {
		out, err := s.virsh(ctx, append([]string{"dumpxml"}, append(args, m.Name)...)...)
		if err != nil {
			t.Fatal(err)
		}
		x := string(out)
		i := strings.Index(x, "device='cdrom'")
		if i < 0 {
			t.Fatalf("the domain has no CD-ROM drive:\n%s", x)
		}
		return x[i : i+strings.Index(x[i:], "</disk>")]
	}
	if st := domstate(); st != "shut off" {
		t.Fatalf("a new machine is %q, want shut off", st)
	}
	if c := cdrom("--inactive"); strings.Contains(c, "<source file=") || !strings.Contains(c, "bus='sata'") {
		t.Errorf("the new machine's CD-ROM drive is not an empty SATA drive:\n%s", c)
	}

	image := bytes.Repeat([]byte("vsite redfish test image\n"), 40000) // 1 MB
	c := newRedfishClient(t, "https://172.25.0.3:6250", s.BMCCA(), m.BMCUser, m.BMCPassword)
	driveRedfish(t, c, s.opts.Machines[0], imageServer(t, image), image, state, func(step string) {
		switch step {
		case "boot override Cd":
			if c := cdrom("--inactive"); !strings.Contains(c, "<boot order='1'/>") {
				t.Errorf("the CD-ROM drive is not first in the boot order:\n%s", c)
			}
		case "power on":
			if st := domstate(); st != "running" {
				t.Errorf("after On the machine is %q, want running", st)
			}
		case "insert media":
			for _, args := range [][]string{nil, {"--inactive"}} {
				if c := cdrom(args...); !strings.Contains(c, "<source file='"+dir+"/vsite-rf-0.cd.iso'") {
					t.Errorf("dumpxml %v: the CD-ROM drive does not hold the image:\n%s", args, c)
				}
			}
		case "eject media":
			for _, args := range [][]string{nil, {"--inactive"}} {
				if c := cdrom(args...); strings.Contains(c, "<source file=") {
					t.Errorf("dumpxml %v: the CD-ROM drive is not empty:\n%s", args, c)
				}
			}
			if _, err := os.Stat(dir + "/vsite-rf-0.cd.iso"); !os.IsNotExist(err) {
				t.Errorf("EjectMedia left the image: %v", err)
			}
		case "force off":
			if st := domstate(); st != "shut off" {
				t.Errorf("after ForceOff the machine is %q, want shut off", st)
			}
		}
	})
	// Secure Boot, as Ironic turns it off and on: the setting goes into
	// the definition at once, and the machine's variables are made from
	// its template (Microsoft's keys, or none) when the machine next
	// starts; a restart of a running machine with a change waiting is a
	// power cycle.
	sb := systemPath(m.Name) + "/SecureBoot"
	secureBoot := func(want, template string) {
		t.Helper()
		a := c.do(t, "GET", sb, nil)
		got := fmt.Sprintf("%v %v %v", get(a.body, "SecureBootEnable"), get(a.body, "SecureBootCurrentBoot"), get(a.body, "SecureBootMode"))
		if a.status != 200 || got != want {
			t.Errorf("SecureBoot: %d %q, want %q", a.status, got, want)
		}
		if got := varsTemplate(dir + "/vsite-rf-0.OVMF_VARS.fd"); got != template {
			t.Errorf("the machine's variables are made from %q, want %q", got, template)
		}
	}
	patch := func(on bool) {
		t.Helper()
		tag := c.do(t, "GET", sb, nil).header.Get("ETag")
		if a := c.do(t, "PATCH", sb, map[string]any{"SecureBootEnable": on}, "If-Match", tag); a.status != 204 {
			t.Fatalf("PATCH SecureBootEnable %v: %d %v", on, a.status, a.body)
		}
	}
	reset := func(typ string) {
		t.Helper()
		if a := c.do(t, "POST", systemPath(m.Name)+"/Actions/ComputerSystem.Reset", map[string]string{"ResetType": typ}); a.status != 204 {
			t.Fatalf("Reset %s: %d %v", typ, a.status, a.body)
		}
		if st := domstate(); st != "running" {
			t.Fatalf("after %s the Secure Boot machine is %q, want running", typ, st)
		}
	}
	secureBoot("true Enabled UserMode", ovmfSecureBootVars)
	patch(false)
	if out, err := s.virsh(ctx, "dumpxml", "--inactive", m.Name); err != nil || !strings.Contains(string(out), "template='"+ovmfVars+"'") {
		t.Errorf("Secure Boot off: the definition's variables template is not %s (%v):\n%s", ovmfVars, err, out)
	}
	secureBoot("false Enabled UserMode", ovmfSecureBootVars)
	reset("On")
	secureBoot("false Disabled SetupMode", ovmfVars)
	patch(true)
	reset("GracefulRestart")
	secureBoot("true Enabled UserMode", ovmfSecureBootVars)
	reset("ForceRestart") // nothing waits: a plain restart
	secureBoot("true Enabled UserMode", ovmfSecureBootVars)
	if a := c.do(t, "POST", systemPath(m.Name)+"/Actions/ComputerSystem.Reset", map[string]string{"ResetType": "ForceOff"}); a.status != 204 {
		t.Errorf("ForceOff: %d", a.status)
	}

	// The machine's POST stays in its definition through every boot
	// override.
	if out, err := s.virsh(ctx, "dumpxml", "--inactive", m.Name); err != nil || !strings.Contains(string(out), "<bootmenu enable='yes' timeout='2000'/>") {
		t.Errorf("the machine's POST is gone from its definition (%v):\n%s", err, out)
	}
	// The BMC's log shows each request, and no secret.
	bmcLog, err := os.ReadFile(s.BMCLog(m.Name))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(bmcLog), "POST /redfish/v1/Systems/vsite-rf-0/Actions/ComputerSystem.Reset: 204") ||
		strings.Contains(string(bmcLog), m.BMCPassword) || strings.Contains(string(bmcLog), "Basic ") {
		t.Errorf("the BMC's log:\n%s", bmcLog)
	}
}
