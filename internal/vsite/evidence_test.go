package vsite

import (
	"strings"
	"testing"
)

// TestBootEvidence: each shape's console lines are found, and a console
// that lacks one is named with what it lacks.
func TestBootEvidence(t *testing.T) {
	const (
		pxe    = ">>Start PXE over IPv4.\r\n  Station IP address is 172.22.0.23\r\n\r\n  Server IP address is 172.22.0.1\r\n  NBP filename is snponly.efi\r\n  NBP filesize is 190464 Bytes\n"
		cd     = "BdsDxe: loading Boot0001 \"UEFI QEMU DVD-ROM QM00005 \" from PciRoot(0x0)/Pci(0x1F,0x2)/Sata(0x2,0xFFFF,0x0)\n"
		netCfg = "[   12.3] bootstick-netdata[301]: bootstick-netdata: network from the virtual media's network_data.json: 172.22.0.53/24 on enp1s0\n"
	)
	uefi := Machine{Name: "u", Firmware: FirmwareUEFI, BMC: BMCIPMI}
	vmedia := Machine{Name: "v", Firmware: FirmwareUEFI, BMC: BMCRedfishVirtualMedia}
	bios := Machine{Name: "b", Firmware: FirmwareBIOS, BMC: BMCIPMI}
	sb := Machine{Name: "v", Firmware: FirmwareUEFISecureBoot, BMC: BMCRedfishVirtualMedia}
	const sbOn = "[    0.000000] secureboot: Secure boot enabled\n"
	for _, c := range []struct {
		name    string
		m       Machine
		console string
		found   int
		missing []string
	}{
		{"UEFI PXE", uefi, "boot\n" + pxe, 1, nil},
		{"UEFI without PXE", uefi, "boot\n" + cd, 0, []string{"u's console shows no sign of the firmware's own PXE client loading snponly.efi"}},
		{"virtual media", vmedia, cd + netCfg, 2, nil},
		{"virtual media, another address", Machine{Name: "v", Firmware: FirmwareUEFI, BMC: BMCRedfishVirtualMedia}, cd + strings.Replace(netCfg, ".53/", ".530/", 1), 1,
			[]string{"network_data.json"}},
		{"virtual media without the CD", vmedia, netCfg, 1, []string{"v's console shows no sign of OVMF booting the CD"}},
		{"BIOS", bios, "iPXE\n", 0, nil},
		{"virtual media, Secure Boot", sb, cd + sbOn + netCfg + sbOn, 3, nil},
		{"virtual media, Secure Boot off for the ramdisk", sb, cd + netCfg + sbOn, 2,
			[]string{"v's console shows no sign of the deploy ramdisk (after that) taking its address"}},
		{"virtual media, Secure Boot never on", sb, cd + netCfg, 2, []string{"v's console shows no sign of the deploy ramdisk's kernel starting under Secure Boot"}},
	} {
		found, err := BootEvidence(c.m, "172.22.0.53", c.console)
		if len(found) != c.found {
			t.Errorf("%s: found %q, want %d lines", c.name, found, c.found)
		}
		if len(c.missing) == 0 && err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		for _, w := range c.missing {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v, want %q", c.name, err, w)
			}
		}
	}
}
