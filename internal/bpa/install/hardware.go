package install

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Role matching reads two requirements on the host itself, as the
// baremetal-operator's inspection (HardwareDetails) reports neither:
// SR-IOV (a NIC whose device offers virtual functions) and QAT (an
// Intel QuickAssist physical function). The host's kernel says both in
// sysfs, whatever drivers are loaded.

// whatHardware is what the query is called; the fake answers by it.
const whatHardware = "reading the host's SR-IOV NICs and QAT devices"

// IntelVendor is Intel's PCI vendor ID, as sysfs writes it.
const IntelVendor = "0x8086"

// QATDeviceIDs are the PCI device IDs of the QAT physical functions the
// Linux kernel's qat drivers bind (drivers/crypto/intel/qat/qat_*), as
// include/linux/pci_ids.h names them: PCI_DEVICE_ID_INTEL_QAT_DH895XCC,
// _C62X, _C3XXX, _4XXX, _401XX, _402XX, _420XX and _6XXX (earlier kernels
// define the same IDs in qat_common/adf_accel_devices.h). Their virtual
// functions (0x0443, 0x37c9, 0x19e3, 0x4941, ...) are not listed: they
// exist only once a physical function made them.
var QATDeviceIDs = []string{
	"0x0435", // DH895xCC (qat_dh895xcc)
	"0x37c8", // C62x (qat_c62x)
	"0x19e2", // C3xxx (qat_c3xxx)
	"0x4940", // 4xxx (qat_4xxx)
	"0x4942", // 401xx (qat_4xxx)
	"0x4944", // 402xx (qat_4xxx)
	"0x4946", // 420xx (qat_420xx)
	"0x4948", // 6xxx (qat_6xxx)
}

// Hardware is what a host shows of SR-IOV and QAT.
type Hardware struct {
	// VFs is each NIC's sriov_totalvfs, by interface name: how many
	// virtual functions its device can offer. NICs without the
	// attribute (no SR-IOV) are not listed.
	VFs map[string]int
	// IntelPCI is each Intel PCI device's device ID (e.g. 0x4940), by
	// PCI address (e.g. 0000:3d:00.0).
	IntelPCI map[string]string
}

// SRIOV names the NICs that offer virtual functions, sorted.
func (h Hardware) SRIOV() []string {
	var out []string
	for nic, n := range h.VFs {
		if n > 0 {
			out = append(out, nic)
		}
	}
	sort.Strings(out)
	return out
}

// QAT names the PCI addresses of QAT physical functions, sorted.
func (h Hardware) QAT() []string {
	var out []string
	for addr, dev := range h.IntelPCI {
		if slices.Contains(QATDeviceIDs, strings.ToLower(dev)) {
			out = append(out, addr)
		}
	}
	sort.Strings(out)
	return out
}

// hardwareScript prints a line "sriov=NIC TOTALVFS" for each NIC with
// the sriov_totalvfs attribute, and "pci=ADDRESS VENDOR DEVICE" for each
// Intel PCI device, read under sys (/sys on a host; a test's tree). It
// only reads.
func hardwareScript(sys string) string {
	return `sys=` + shellQuote(sys) + `
for f in "$sys"/class/net/*/device/sriov_totalvfs; do
	[ -r "$f" ] || continue
	nic=${f#"$sys"/class/net/}
	echo "sriov=${nic%%/*} $(cat "$f")"
done
for d in "$sys"/bus/pci/devices/*; do
	[ -r "$d/vendor" ] && [ -r "$d/device" ] || continue
	vendor=$(cat "$d/vendor")
	if [ "$vendor" = ` + IntelVendor + ` ]; then echo "pci=${d##*/} $vendor $(cat "$d/device")"; fi
done
`
}

// ReadHardware reads the host's SR-IOV NICs and Intel PCI devices.
func ReadHardware(ctx context.Context, host Querier) (Hardware, error) {
	out, err := host.Query(ctx, whatHardware, hardwareScript("/sys"))
	if err != nil {
		return Hardware{}, err
	}
	return parseHardware(string(out))
}

// parseHardware reads hardwareScript's answer.
func parseHardware(out string) (Hardware, error) {
	h := Hardware{VFs: map[string]int{}, IntelPCI: map[string]string{}}
	for _, l := range lines(out) {
		k, v, _ := strings.Cut(l, "=")
		f := strings.Fields(v)
		switch k {
		case "sriov":
			if len(f) != 2 {
				return Hardware{}, fmt.Errorf("reading the host's NICs: line %q is not sriov=NIC COUNT", l)
			}
			n, err := strconv.Atoi(f[1])
			if err != nil || n < 0 {
				return Hardware{}, fmt.Errorf("reading the host's NICs: %s has sriov_totalvfs %q, not a count", f[0], f[1])
			}
			h.VFs[f[0]] = n
		case "pci":
			if len(f) != 3 {
				return Hardware{}, fmt.Errorf("reading the host's PCI devices: line %q is not pci=ADDRESS VENDOR DEVICE", l)
			}
			if strings.EqualFold(f[1], IntelVendor) {
				h.IntelPCI[f[0]] = strings.ToLower(f[2])
			}
		}
	}
	return h, nil
}

// output is h as hardwareScript prints it (the fake answers with it).
func (h Hardware) output() string {
	var s strings.Builder
	for nic, n := range h.VFs {
		fmt.Fprintf(&s, "sriov=%s %d\n", nic, n)
	}
	for addr, dev := range h.IntelPCI {
		fmt.Fprintf(&s, "pci=%s %s %s\n", addr, IntelVendor, dev)
	}
	return s.String()
}
