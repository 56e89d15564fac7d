package install

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestRoleMatchHardwareParses: SR-IOV is a NIC with virtual functions
// to offer (sriov_totalvfs above 0), QAT an Intel device whose ID is a
// QAT physical function the kernel's drivers bind; a virtual function, or
// another vendor's device with a QAT ID, is not one. An answer that is
// not the script's is an error, not an empty host.
func TestRoleMatchHardwareParses(t *testing.T) {
	for _, c := range []struct {
		name, out   string
		sriov, qat  []string
		errContains string
	}{
		{name: "nothing", out: ""},
		{name: "sriov", out: "sriov=eno1 0\nsriov=ens1f0 64\nsriov=ens1f1 64\n", sriov: []string{"ens1f0", "ens1f1"}},
		{name: "sriov none offered", out: "sriov=eno1 0\n"},
		{name: "qat 4xxx", out: "pci=0000:6b:00.0 0x8086 0x4940\npci=0000:00:1f.0 0x8086 0x1bca\n", qat: []string{"0000:6b:00.0"}},
		{name: "qat c62x upper case", out: "pci=0000:3d:00.0 0x8086 0x37C8\n", qat: []string{"0000:3d:00.0"}},
		{name: "qat virtual function only", out: "pci=0000:6b:00.1 0x8086 0x4941\n"},
		{name: "another vendor's id", out: "pci=0000:01:00.0 0x10de 0x4940\n"},
		{name: "both", out: "sriov=ens2 8\npci=0000:e8:00.0 0x8086 0x4948\n", sriov: []string{"ens2"}, qat: []string{"0000:e8:00.0"}},
		{name: "bad count", out: "sriov=eno1 lots\n", errContains: `eno1 has sriov_totalvfs "lots"`},
		{name: "short pci line", out: "pci=0000:6b:00.0 0x8086\n", errContains: "not pci=ADDRESS VENDOR DEVICE"},
	} {
		h, err := ReadHardware(context.Background(), answer(c.out))
		if c.errContains != "" {
			if err == nil || !strings.Contains(err.Error(), c.errContains) {
				t.Errorf("%s: error %v, want one with %q", c.name, err, c.errContains)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !slices.Equal(h.SRIOV(), c.sriov) || !slices.Equal(h.QAT(), c.qat) {
			t.Errorf("%s: SR-IOV %v, QAT %v; want %v, %v", c.name, h.SRIOV(), h.QAT(), c.sriov, c.qat)
		}
		// The fake answers with what the script prints.
		back, err := parseHardware(h.output())
		if err != nil || !slices.Equal(back.SRIOV(), c.sriov) || !slices.Equal(back.QAT(), c.qat) {
			t.Errorf("%s: the fake's answer reads back as %+v, %v", c.name, back, err)
		}
	}
}

// TestRoleMatchHardwareScriptReadsSysfs runs the query's script with bash
// as a host runs it (bash -euo pipefail, one brace group) on a sysfs tree
// of the test's: links as the kernel makes them, a NIC with virtual
// functions, one with none, one without SR-IOV, a loopback without a
// device, a QAT physical function and its virtual function, another
// vendor's device, and a device whose vendor cannot be read. An empty
// tree answers nothing and does not fail.
func TestRoleMatchHardwareScriptReadsSysfs(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	sys := t.TempDir()
	write := func(path, content string) {
		t.Helper()
		p := filepath.Join(sys, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, path string) {
		t.Helper()
		p := filepath.Join(sys, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	pci := func(addr, vendor, device string) {
		write("devices/pci0000:00/"+addr+"/vendor", vendor+"\n")
		write("devices/pci0000:00/"+addr+"/device", device+"\n")
		link("../../../devices/pci0000:00/"+addr, "bus/pci/devices/"+addr)
	}
	nic := func(name, addr string) {
		link("../../devices/pci0000:00/"+addr+"/net/"+name, "class/net/"+name)
		link("../../../"+addr, "devices/pci0000:00/"+addr+"/net/"+name+"/device")
	}
	pci("0000:01:00.0", "0x8086", "0x1593")
	write("devices/pci0000:00/0000:01:00.0/sriov_totalvfs", "64\n")
	nic("ens1f0", "0000:01:00.0")
	pci("0000:02:00.0", "0x8086", "0x1533")
	write("devices/pci0000:00/0000:02:00.0/sriov_totalvfs", "0\n")
	nic("eno1", "0000:02:00.0")
	pci("0000:03:00.0", "0x14e4", "0x165f")
	nic("eno2", "0000:03:00.0")
	if err := os.MkdirAll(filepath.Join(sys, "devices/virtual/net/lo"), 0o755); err != nil {
		t.Fatal(err)
	}
	link("../../devices/virtual/net/lo", "class/net/lo")
	pci("0000:6b:00.0", "0x8086", "0x4940")
	pci("0000:6b:00.1", "0x8086", "0x4941")
	pci("0000:81:00.0", "0x10de", "0x4940")
	link("../../../devices/pci0000:00/0000:ff:00.0", "bus/pci/devices/0000:ff:00.0") // dangling

	run := func(root string) string {
		t.Helper()
		cmd := exec.Command("bash", "-euo", "pipefail", "-s")
		cmd.Stdin = strings.NewReader(wholeScript(hardwareScript(root)))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("the script on %s: %v\n%s", root, err, out)
		}
		return string(out)
	}
	out := run(sys)
	h, err := parseHardware(out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got := h.SRIOV(); !slices.Equal(got, []string{"ens1f0"}) {
		t.Errorf("SR-IOV NICs %v, want ens1f0; the script printed:\n%s", got, out)
	}
	if got := h.QAT(); !slices.Equal(got, []string{"0000:6b:00.0"}) {
		t.Errorf("QAT devices %v, want 0000:6b:00.0; the script printed:\n%s", got, out)
	}
	if h.VFs["eno1"] != 0 || len(h.VFs) != 2 || strings.Contains(out, "0x10de") {
		t.Errorf("the script printed:\n%s\nwant ens1f0 and eno1 with their counts, and Intel devices only", out)
	}
	if out := run(t.TempDir()); out != "" {
		t.Errorf("an empty sysfs tree printed %q", out)
	}
}
