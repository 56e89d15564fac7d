package vsite

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bootstick/bootstick/internal/qemu"
)

// render is the definition define writes for m, parsed.
func render(t *testing.T, m Machine) *xmlNode {
	t.Helper()
	s := &Site{opts: Options{Dir: "/site"}}
	x := s.domainVarsOf(m, "/usr/bin/qemu-system-x86_64")
	var b bytes.Buffer
	if err := domainXML.Execute(&b, x); err != nil {
		t.Fatal(err)
	}
	dom, err := parseDomainXML(b.Bytes())
	if err != nil {
		t.Fatalf("%v\n%s", err, b.Bytes())
	}
	return dom
}

// bootOf is what a device element says about booting: "order N", "" for
// nothing.
func bootOf(d *xmlNode) string {
	if b := d.child("boot"); b != nil {
		return "order " + b.attr("order")
	}
	return ""
}

func osBoots(dom *xmlNode) string {
	var devs []string
	for _, b := range dom.child("os").children("boot") {
		devs = append(devs, b.attr("dev"))
	}
	return strings.Join(devs, ",")
}

func TestDomainXML(t *testing.T) {
	bios := render(t, Machine{Name: "b", MAC: "52:54:00:00:00:01", MemoryMiB: 256, CPUs: 1, Firmware: FirmwareBIOS})
	uefi := render(t, Machine{Name: "u", MAC: "52:54:00:00:00:02", MemoryMiB: 256, CPUs: 1, Firmware: FirmwareUEFI,
		ExtraMACs: []string{"52:54:00:00:01:02", "52:54:00:00:02:02"}})

	// BIOS: as before, plus an empty IDE CD-ROM drive.
	if got := bios.child("os").child("type").attr("machine"); got != "pc" {
		t.Errorf("BIOS machine type %s", got)
	}
	if got := osBoots(bios); got != "network,hd" {
		t.Errorf("BIOS boot order %s, want network,hd", got)
	}
	if bios.uefi() || bios.child("os").child("nvram") != nil {
		t.Error("a BIOS machine has UEFI firmware")
	}
	nic := bios.bootDevice(bootPxe)
	if nic.child("rom") != nil || bootOf(nic) != "" {
		t.Error("the BIOS machine's boot NIC changed")
	}
	if got := bios.macs(); len(got) != 1 {
		t.Errorf("BIOS NICs %v", got)
	}
	if target, file, err := bios.cdrom(); err != nil || target != "hdc" || file != "" {
		t.Errorf("BIOS CD-ROM %q %q %v, want an empty hdc", target, file, err)
	}
	if got := bios.bootDevice(bootCd).child("target").attr("bus"); got != "ide" {
		t.Errorf("BIOS CD-ROM bus %s", got)
	}

	// UEFI: q35, OVMF with its own NVRAM, per-device order, no NIC ROMs.
	o := uefi.child("os")
	if got := o.child("type").attr("machine"); got != "q35" {
		t.Errorf("UEFI machine type %s", got)
	}
	if l := o.child("loader"); l == nil || l.Text != ovmfCode || l.attr("readonly") != "yes" || l.attr("type") != "pflash" {
		t.Errorf("UEFI loader %+v", l)
	}
	if got := o.text("nvram"); got != "/site/u.OVMF_VARS.fd" {
		t.Errorf("UEFI NVRAM %q", got)
	}
	if got := osBoots(uefi); got != "" {
		t.Errorf("UEFI machine has <os><boot dev>: %s", got)
	}
	if got := bootOf(uefi.bootDevice(bootPxe)); got != "order 1" {
		t.Errorf("UEFI boot NIC: %q", got)
	}
	if got := bootOf(uefi.bootDevice(bootHdd)); got != "order 2" {
		t.Errorf("UEFI disk: %q", got)
	}
	if got := uefi.bootDevice(bootHdd).child("target").attr("dev"); got != "sda" {
		t.Errorf("UEFI disk target %s, want sda", got)
	}
	if got := uefi.bootTarget(); got != bootPxe {
		t.Errorf("UEFI boot target %s", got)
	}
	if target, file, err := uefi.cdrom(); err != nil || target != "sdb" || file != "" {
		t.Errorf("UEFI CD-ROM %q %q %v, want an empty sdb", target, file, err)
	}
	if got := uefi.bootDevice(bootCd).child("target").attr("bus"); got != "sata" {
		t.Errorf("UEFI CD-ROM bus %s", got)
	}
	nics := uefi.child("devices").children("interface")
	if got := strings.Join(uefi.macs(), " "); got != "52:54:00:00:00:02 52:54:00:00:01:02 52:54:00:00:02:02" {
		t.Errorf("UEFI NICs %s", got)
	}
	for i, n := range nics {
		if r := n.child("rom"); r == nil || r.attr("enabled") != "no" {
			t.Errorf("UEFI NIC %d has its option ROM", i)
		}
		if i > 0 && bootOf(n) != "" {
			t.Errorf("extra NIC %d boots", i)
		}
		if n.child("source").attr("bridge") != bridge {
			t.Errorf("NIC %d is not on the bridge", i)
		}
	}
	if uefi.secureBootCapable() || uefi.child("features").child("smm") != nil {
		t.Error("a UEFI machine has Secure Boot firmware")
	}
	if _, template := uefi.nvram(); template != ovmfVars {
		t.Errorf("UEFI NVRAM template %q, want %s", template, ovmfVars)
	}

	// Secure Boot: OVMF's Secure Boot build, with SMM, its variables
	// from Microsoft's keys; the template changes with the setting.
	sb := render(t, Machine{Name: "s", MAC: "52:54:00:00:00:03", MemoryMiB: 256, CPUs: 1, Firmware: FirmwareUEFISecureBoot})
	if l := sb.child("os").child("loader"); l == nil || l.Text != ovmfSecureBootCode || l.attr("secure") != "yes" || !sb.secureBootCapable() {
		t.Errorf("Secure Boot loader %+v", l)
	}
	if smm := sb.child("features").child("smm"); smm == nil || smm.attr("state") != "on" {
		t.Error("a Secure Boot machine has no SMM")
	}
	if file, template := sb.nvram(); file != "/site/s.OVMF_VARS.fd" || template != ovmfSecureBootVars {
		t.Errorf("Secure Boot NVRAM %q from %q", file, template)
	}
	if err := sb.setNVRAMTemplate(ovmfVars); err != nil {
		t.Fatal(err)
	}
	if _, template := sb.nvram(); template != ovmfVars {
		t.Errorf("after setNVRAMTemplate the template is %q", template)
	}
}

func TestSetBootTarget(t *testing.T) {
	for _, c := range []struct {
		firmware, target string
		osBoot           string            // BIOS
		order            map[string]string // UEFI: device → boot
	}{
		{FirmwareBIOS, bootCd, "cdrom,hd", nil},
		{FirmwareBIOS, bootHdd, "hd", nil},
		{FirmwareBIOS, bootPxe, "network,hd", nil},
		{FirmwareUEFI, bootCd, "", map[string]string{bootCd: "order 1", bootHdd: "order 2", bootPxe: ""}},
		{FirmwareUEFI, bootHdd, "", map[string]string{bootCd: "", bootHdd: "order 1", bootPxe: ""}},
		{FirmwareUEFI, bootPxe, "", map[string]string{bootCd: "", bootHdd: "order 2", bootPxe: "order 1"}},
	} {
		t.Run(c.firmware+"/"+c.target, func(t *testing.T) {
			dom := render(t, Machine{Name: "m", MAC: "52:54:00:00:00:01", ExtraMACs: []string{"52:54:00:00:01:01"}, Firmware: c.firmware})
			// Twice: the second edit starts from the first's result.
			for _, target := range []string{bootHdd, c.target} {
				if err := dom.setBootTarget(target); err != nil {
					t.Fatal(err)
				}
			}
			// What virsh define gets, read back.
			data, err := dom.marshal()
			if err != nil {
				t.Fatal(err)
			}
			dom, err = parseDomainXML(data)
			if err != nil {
				t.Fatal(err)
			}
			if got := dom.bootTarget(); got != c.target {
				t.Errorf("boot target %s, want %s\n%s", got, c.target, data)
			}
			if got := osBoots(dom); got != c.osBoot {
				t.Errorf("<os><boot dev> %q, want %q\n%s", got, c.osBoot, data)
			}
			for dev, want := range c.order {
				if got := bootOf(dom.bootDevice(dev)); got != want {
					t.Errorf("%s: boot %q, want %q\n%s", dev, got, want, data)
				}
			}
			if c.firmware == FirmwareBIOS && strings.Contains(string(data), "order=") {
				t.Errorf("a BIOS machine got per-device boot order:\n%s", data)
			}
			if extra := dom.child("devices").children("interface")[1]; bootOf(extra) != "" {
				t.Errorf("the extra NIC boots:\n%s", data)
			}
			if !dom.uefi() == (c.firmware == FirmwareUEFI) {
				t.Error("the firmware changed")
			}
		})
	}
	dom := render(t, Machine{Name: "m", MAC: "52:54:00:00:00:01"})
	if err := dom.setBootTarget("Floppy"); err == nil {
		t.Error("boot target Floppy was taken")
	}
}

// A definition as libvirt writes it (virtualbmc has set the boot device
// of a UEFI machine): <os><boot dev> wins, and a Redfish boot override
// replaces it with per-device order.
func TestBootTargetOfLibvirtXML(t *testing.T) {
	const dumped = `<domain type='qemu'>
  <name>n</name>
  <uuid>0b6a1c3e-4d1b-4a5e-9c55-7f1f2b3c4d5e</uuid>
  <memory unit='KiB'>262144</memory>
  <vcpu placement='static'>1</vcpu>
  <os>
    <type arch='x86_64' machine='pc-q35-7.2'>hvm</type>
    <loader readonly='yes' type='pflash'>/usr/share/OVMF/OVMF_CODE_4M.fd</loader>
    <nvram>/site/n.OVMF_VARS.fd</nvram>
    <boot dev='hd'/>
  </os>
  <devices>
    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2' cache='unsafe'/>
      <source file='/site/n.qcow2'/>
      <target dev='sda' bus='scsi'/>
      <address type='drive' controller='0' bus='0' target='0' unit='0'/>
    </disk>
    <disk type='file' device='cdrom'>
      <driver name='qemu' type='raw'/>
      <source file='/site/n.cd.iso'/>
      <target dev='sdb' bus='sata'/>
      <readonly/>
    </disk>
    <interface type='bridge'>
      <mac address='52:54:00:00:00:09'/>
      <source bridge='br0'/>
      <model type='virtio'/>
      <rom enabled='no'/>
    </interface>
  </devices>
</domain>
`
	dom, err := parseDomainXML([]byte(dumped))
	if err != nil {
		t.Fatal(err)
	}
	if got := dom.bootTarget(); got != bootHdd {
		t.Errorf("boot target %s, want Hdd", got)
	}
	if _, file, _ := dom.cdrom(); file != "/site/n.cd.iso" {
		t.Errorf("CD %q", file)
	}
	if got := dom.text("uuid"); got != "0b6a1c3e-4d1b-4a5e-9c55-7f1f2b3c4d5e" {
		t.Errorf("uuid %q", got)
	}
	if err := dom.setBootTarget(bootCd); err != nil {
		t.Fatal(err)
	}
	data, _ := dom.marshal()
	if osBoots(dom) != "" || bootOf(dom.bootDevice(bootCd)) != "order 1" || bootOf(dom.bootDevice(bootHdd)) != "order 2" {
		t.Errorf("Cd override:\n%s", data)
	}
	for _, keep := range []string{`<address type="drive" controller="0" bus="0" target="0" unit="0"></address>`, `<rom enabled="no"></rom>`, `<vcpu placement="static">1</vcpu>`} {
		if !strings.Contains(string(data), keep) {
			t.Errorf("the edit lost %s:\n%s", keep, data)
		}
	}
}

// TestDomainXMLClock: a machine's hardware clock is UTC, or as far ahead
// (or behind) as ClockAhead says.
func TestDomainXMLClock(t *testing.T) {
	for _, c := range []struct {
		ahead                   time.Duration
		offset, adjustment, bas string
	}{
		{0, "utc", "", ""},
		{3 * time.Hour, "variable", "10800", "utc"},
		{-90 * time.Minute, "variable", "-5400", "utc"},
	} {
		clock := render(t, Machine{Name: "c", MAC: "52:54:00:00:00:03", MemoryMiB: 256, CPUs: 1, Firmware: FirmwareBIOS, ClockAhead: c.ahead}).child("clock")
		if clock == nil || clock.attr("offset") != c.offset || clock.attr("adjustment") != c.adjustment || clock.attr("basis") != c.bas {
			t.Errorf("ClockAhead %v: clock %+v, want offset %q adjustment %q basis %q", c.ahead, clock, c.offset, c.adjustment, c.bas)
		}
	}
}

// TestDomainXMLPOST: a machine with a POST holds in its firmware's boot
// menu that long (SeaBIOS and OVMF both honour it), one without boots at
// once.
func TestDomainXMLPOST(t *testing.T) {
	for _, fw := range []string{FirmwareBIOS, FirmwareUEFI} {
		for _, c := range []struct {
			post             time.Duration
			enable, deadline string
		}{
			{0, "", ""},
			{time.Minute, "yes", "60000"},
		} {
			menu := render(t, Machine{Name: "p", MAC: "52:54:00:00:00:04", MemoryMiB: 256, CPUs: 1, Firmware: fw, POST: c.post}).child("os").child("bootmenu")
			if c.enable == "" {
				if menu != nil {
					t.Errorf("%s, no POST: a boot menu %+v", fw, menu)
				}
				continue
			}
			if menu == nil || menu.attr("enable") != c.enable || menu.attr("timeout") != c.deadline {
				t.Errorf("%s, POST %v: boot menu %+v, want enable %q timeout %q", fw, c.post, menu, c.enable, c.deadline)
			}
		}
	}
}

// TestDomainXMLCPU: a machine's vCPUs are the cores of one socket, as a
// one-socket server's are (with a socket each, Linux distrusts the TSC of
// TCG's qemu64 and reads the emulated HPET), and TCG translates into the
// appliance's cache size.
func TestDomainXMLCPU(t *testing.T) {
	for _, fw := range []string{FirmwareBIOS, FirmwareUEFI, FirmwareUEFISecureBoot} {
		dom := render(t, Machine{Name: "c", MAC: "52:54:00:00:00:05", MemoryMiB: 256, CPUs: 3, Firmware: fw})
		top := dom.child("cpu").child("topology")
		if top == nil || top.attr("sockets") != "1" || top.attr("cores") != "3" || top.attr("threads") != "1" {
			t.Errorf("%s: CPU topology %+v, want 3 cores in 1 socket", fw, top)
		}
		if got := dom.child("features").child("tcg").text("tb-cache"); got != strconv.Itoa(qemu.TBCacheMiB) {
			t.Errorf("%s: TCG translation cache %q MiB, want %d", fw, got, qemu.TBCacheMiB)
		}
	}
}
