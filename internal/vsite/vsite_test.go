package vsite

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bootstick/bootstick/internal/bmcprobe"
	"github.com/bootstick/bootstick/internal/testctx"
)

// TestBMCDrivesTheMachine starts a site of one machine and drives its BMC
// as Ironic does, with ipmitool over IPMI 2.0 (lanplus) from this machine:
// power on starts the QEMU machine, the boot device lands in its
// definition, power off stops it; a wrong password is refused.
func TestBMCDrivesTheMachine(t *testing.T) {
	if testing.Short() {
		t.Skip("starts libvirtd, virtualbmc and a QEMU machine (root)")
	}
	ctx, cancel := testctx.New(t, 3*time.Minute)
	defer cancel()
	m := Machine{Name: "vsite-test-0", MAC: "52:54:00:b0:0e:01", BMCPort: 6240, BMCUser: "admin", BMCPassword: "pw-vsite-test", MemoryMiB: 256}
	s := startTestSite(t, ctx, Options{
		Dir: t.TempDir(), Netns: "bootstick-test-vsite-bmc", HostIface: "bsvs0",
		Network: netip.MustParsePrefix("172.23.0.0/24"), HostAddr: netip.MustParseAddr("172.23.0.1"), BMCAddr: netip.MustParseAddr("172.23.0.2"),
		Machines: []Machine{m}, MachineNice: 19,
	})
	if got := s.BMCAddress(m); got != "ipmi://172.23.0.2:6240" {
		t.Errorf("BMC address %s", got)
	}
	ipmi := func(password string, args ...string) (string, error) {
		out, err := run(ctx, append([]string{"ipmitool", "-I", "lanplus", "-H", "172.23.0.2", "-p", "6240", "-U", "admin", "-P", password, "-R", "3", "-N", "5"}, args...)...)
		return string(out), err
	}
	state := func() string {
		st, err := s.PowerState(ctx, m.Name)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	if st := state(); st != "shut off" {
		t.Fatalf("a new machine is %q, want shut off", st)
	}
	if r, err := bmcprobe.Probe(ctx, s.BMCAddress(m), 5*time.Second); r != bmcprobe.Answers {
		t.Errorf("the BMC does not answer a probe: %v %v", r, err)
	}
	if out, err := ipmi("wrong-password", "power", "status"); err == nil {
		t.Errorf("the BMC answered a wrong password: %s", out)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"chassis", "bootdev", "disk"}, ""},
		{[]string{"power", "on"}, "running"},
		{[]string{"power", "status"}, ""},
		{[]string{"power", "off"}, "shut off"},
	} {
		out, err := ipmi(m.BMCPassword, c.args...)
		if err != nil {
			t.Fatalf("ipmitool %s: %v\n%s", strings.Join(c.args, " "), err, out)
		}
		if c.want != "" {
			if st := state(); st != c.want {
				t.Errorf("after %s the machine is %q, want %q", strings.Join(c.args, " "), st, c.want)
			}
		}
		if c.args[1] == "status" && !strings.Contains(out, "Chassis Power is on") {
			t.Errorf("power status: %s", out)
		}
		if c.args[1] == "status" {
			// The machine's QEMU runs below what it tests, at the
			// site's niceness.
			if nice, err := s.machineNice(m.Name); err != nil || nice != 19 {
				t.Errorf("the running machine's niceness is %d (%v), want 19", nice, err)
			}
			// Across sessions the scheduler shares by autogroup first,
			// so the machine's own session must be niced too.
			if group, err := s.machineAutogroup(m.Name); err != nil || group != "" && !strings.HasSuffix(group, " nice 19") {
				t.Errorf("the running machine's autogroup is %q (%v), want one at nice 19", group, err)
			}
		}
	}
	// A tap for a QEMU run from this side lands on the bridge, inside.
	tap, err := s.Tap(ctx, "bsvstap0")
	if err != nil {
		t.Fatal(err)
	}
	link, err := run(ctx, "ip", "-n", "bootstick-test-vsite-bmc", "-o", "link", "show", "bsvstap0")
	if err != nil || !strings.Contains(string(link), "master br0") {
		t.Errorf("the tap is not on the bridge inside the namespace: %v\n%s", err, link)
	}
	if out, err := run(ctx, "ip", "link", "show", "bsvstap0"); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("the tap is visible on this machine's side: %s", out)
	}
	tap.Close()

	xml, err := s.virsh(ctx, "dumpxml", "--inactive", m.Name)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(xml), "<boot dev='hd'/>") || strings.Contains(string(xml), "<boot dev='network'/>") {
		t.Errorf("bootdev disk did not make the disk the boot device:\n%s", xml)
	}
}

// machineNice reads the niceness of the machine's QEMU (the pid file
// libvirt keeps, field 19 of /proc/PID/stat).
func (s *Site) machineNice(name string) (int, error) {
	pid, err := os.ReadFile(filepath.Join(s.libvirtDir("/run/libvirt"), "qemu", name+".pid"))
	if err != nil {
		return 0, err
	}
	stat, err := os.ReadFile("/proc/" + strings.TrimSpace(string(pid)) + "/stat")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return strconv.Atoi(f[16])
}

// machineAutogroup reads the scheduling autogroup of the machine's QEMU
// ("/autogroup-N nice K"), or "" when the kernel has no autogroups.
func (s *Site) machineAutogroup(name string) (string, error) {
	pid, err := os.ReadFile(filepath.Join(s.libvirtDir("/run/libvirt"), "qemu", name+".pid"))
	if err != nil {
		return "", err
	}
	group, err := os.ReadFile("/proc/" + strings.TrimSpace(string(pid)) + "/autogroup")
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	return strings.TrimSpace(string(group)), err
}

// startTestSite starts a site, and closes it when the test ends, checking
// that Close leaves no network namespace.
func startTestSite(t *testing.T, ctx context.Context, o Options) *Site {
	t.Helper()
	s, err := Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
		if _, err := os.Stat("/run/netns/" + o.Netns); err == nil {
			t.Error("Close left the network namespace")
		}
	})
	return s
}

// TestOptionsBMCAddresses: each BMC may have an address of its own in the
// site's network; two BMCs may share a port only on different addresses.
// The bridge carries each address once, the site's first.
func TestOptionsBMCAddresses(t *testing.T) {
	addr := netip.MustParseAddr
	for _, c := range []struct {
		name  string
		a, b  Machine
		want  string // "" is no error
		addrs string // the bridge's BMC addresses
	}{
		{"shared address, own ports", Machine{BMCPort: 6230}, Machine{BMCPort: 6231}, "", "[172.23.0.2]"},
		{"own addresses, one port", Machine{BMCAddr: addr("172.23.0.3"), BMCPort: 623}, Machine{BMCAddr: addr("172.23.0.4"), BMCPort: 623}, "", "[172.23.0.2 172.23.0.3 172.23.0.4]"},
		{"one own, one shared", Machine{BMCAddr: addr("172.23.0.3"), BMCPort: 623}, Machine{BMCPort: 623}, "", "[172.23.0.2 172.23.0.3]"},
		{"one address, one port", Machine{BMCAddr: addr("172.23.0.3"), BMCPort: 623}, Machine{BMCAddr: addr("172.23.0.3"), BMCPort: 623}, "BMC port 623 on 172.23.0.3 is taken", ""},
		{"the site's address, one port", Machine{BMCAddr: addr("172.23.0.2"), BMCPort: 623}, Machine{BMCPort: 623}, "BMC port 623 on 172.23.0.2 is taken", ""},
		{"outside the network", Machine{BMCAddr: addr("172.24.0.3"), BMCPort: 623}, Machine{BMCPort: 624}, "BMC address 172.24.0.3 is not in 172.23.0.0/24", ""},
		{"the host's address", Machine{BMCAddr: addr("172.23.0.1"), BMCPort: 623}, Machine{BMCPort: 624}, "BMC address 172.23.0.1", ""},
	} {
		c.a.Name, c.a.MAC, c.b.Name, c.b.MAC = "a", "52:54:00:00:00:0a", "b", "52:54:00:00:00:0b"
		o := Options{Dir: t.TempDir(), Netns: "n", HostIface: "i", Network: netip.MustParsePrefix("172.23.0.0/24"),
			HostAddr: addr("172.23.0.1"), BMCAddr: addr("172.23.0.2"), Machines: []Machine{c.a, c.b}}
		if err := checkOptions(t, c.name, &o, c.want); err == nil {
			if got := fmt.Sprint((&Site{opts: o}).bmcAddrs()); got != c.addrs {
				t.Errorf("%s: the bridge's BMC addresses are %s, want %s", c.name, got, c.addrs)
			}
		}
	}
}

// checkOptions checks o (Options.check) in the case named name: no error
// when want is empty, else one that holds want. It returns check's error.
func checkOptions(t *testing.T, name string, o *Options, want string) error {
	t.Helper()
	err := o.check()
	switch {
	case want == "" && err != nil:
		t.Errorf("%s: %v", name, err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Errorf("%s: %v, want %q", name, err, want)
	}
	return err
}

// TestOptionsPOSTAndNice: a machine's POST is whole seconds within what
// libvirt's boot menu can hold; the machines' niceness is 1 to 19, 5 when
// the site names none.
func TestOptionsPOSTAndNice(t *testing.T) {
	for _, c := range []struct {
		name string
		post time.Duration
		nice int
		want string // "" is no error
	}{
		{"none", 0, 0, ""},
		{"a minute", time.Minute, 19, ""},
		{"the longest", MaxPOST, 1, ""},
		{"too long", MaxPOST + time.Second, 0, "POST 1m6s is not whole seconds from 0 to 1m5s"},
		{"negative", -time.Second, 0, "POST -1s"},
		{"a fraction", 1500 * time.Millisecond, 0, "POST 1.5s"},
		{"nice too high", 0, 20, "machine niceness 20 is not 1 to 19"},
		{"nice negative", 0, -1, "machine niceness -1"},
	} {
		o := Options{Dir: t.TempDir(), Netns: "n", HostIface: "i", Network: netip.MustParsePrefix("172.23.0.0/24"),
			HostAddr: netip.MustParseAddr("172.23.0.1"), BMCAddr: netip.MustParseAddr("172.23.0.2"), MachineNice: c.nice,
			Machines: []Machine{{Name: "a", MAC: "52:54:00:00:00:0a", BMCPort: 623, POST: c.post}}}
		if err := checkOptions(t, c.name, &o, c.want); err == nil && (c.nice == 0 && o.MachineNice != 5 || c.nice != 0 && o.MachineNice != c.nice) {
			t.Errorf("%s: niceness %d", c.name, o.MachineNice)
		}
	}
}
