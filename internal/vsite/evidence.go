package vsite

import (
	"errors"
	"fmt"
	"os"
	"regexp"

	"github.com/bootstick/bootstick/internal/command"
	"github.com/bootstick/bootstick/internal/qemu"
)

// The console lines each boot path leaves: OVMF's own PXE client loading
// iPXE (snponly.efi) over TFTP; OVMF booting the CD a BMC mounted; the
// deploy ramdisk (images/ipa's bootstick-netdata) taking its address from
// the virtual media's network_data.json; Debian's kernel started under
// Secure Boot.
var (
	firmwarePXE   = regexp.MustCompile(`NBP filename is snponly\.efi[^\n]*`)
	secureBoot    = regexp.MustCompile(`secureboot: Secure boot enabled[^\n]*`)
	cdBoot        = regexp.MustCompile(`BdsDxe: (loading|starting) Boot[0-9A-F]+ "UEFI QEMU DVD-ROM[^\n]*`)
	mediaNetworkf = `bootstick-netdata: network from the virtual media's network_data\.json: %s\b[^\n]*`
)

// Console is the machine's serial console as text, its terminal escapes
// left out.
func (s *Site) Console(name string) (string, error) {
	data, err := os.ReadFile(s.SerialLog(name))
	if err != nil {
		return "", fmt.Errorf("machine %s: %w", name, err)
	}
	return qemu.ConsoleText(data), nil
}

// BootEvidence reads what a machine's console (Site.Console) shows of its
// shape's boot: a UEFI machine that boots from the network, its firmware's
// own PXE client loading snponly.efi (its NICs have no option ROM); a
// machine its BMC boots by virtual media, OVMF booting the CD and the
// deploy ramdisk taking ip from the CD's network data. It returns the
// lines it found, or an error naming what the console lacks, with its
// tail. A BIOS machine on the network (the NIC's own iPXE) shows nothing
// of its own.
func BootEvidence(m Machine, ip, console string) ([]string, error) {
	type want struct {
		what string
		re   *regexp.Regexp
	}
	var wants []want
	ordered := false // each want after the one before it
	switch {
	case m.BMC == BMCRedfishVirtualMedia && m.Firmware == FirmwareUEFISecureBoot:
		// In this order: the ramdisk's kernel says Secure Boot is on
		// before the ramdisk takes its address (the instance's kernel
		// says it again later).
		ordered = true
		wants = []want{{"OVMF booting the CD", cdBoot},
			{"the deploy ramdisk's kernel starting under Secure Boot", secureBoot},
			{"the deploy ramdisk (after that) taking its address from the CD's network_data.json", regexp.MustCompile(fmt.Sprintf(mediaNetworkf, regexp.QuoteMeta(ip)))}}
	case m.BMC == BMCRedfishVirtualMedia:
		wants = []want{{"OVMF booting the CD", cdBoot},
			{"the deploy ramdisk taking its address from the CD's network_data.json", regexp.MustCompile(fmt.Sprintf(mediaNetworkf, regexp.QuoteMeta(ip)))}}
	case m.Firmware == FirmwareUEFI:
		wants = []want{{"the firmware's own PXE client loading snponly.efi", firmwarePXE}}
	}
	var found []string
	var errs []error
	from := 0
	for _, w := range wants {
		if loc := w.re.FindStringIndex(console[from:]); loc != nil {
			found = append(found, console[from+loc[0]:from+loc[1]])
			if ordered {
				from += loc[1]
			}
		} else {
			errs = append(errs, fmt.Errorf("%s's console shows no sign of %s", m.Name, w.what))
		}
	}
	if len(errs) > 0 {
		return found, fmt.Errorf("%w; its console ends:\n%s", errors.Join(errs...), command.Tail(console, 60))
	}
	return found, nil
}
