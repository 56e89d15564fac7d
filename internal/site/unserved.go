package site

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Devices a host may require that no device plugin on this stick serves.
const (
	DeviceSRIOV = "sriov"
	DeviceQAT   = "qat"
)

// unservedWhy says, per device, why this stick serves no device plugin
// for it and what a host that has it still gets. Neither plugin can be
// built from what mkusb reaches: the module proxy refuses the SR-IOV
// network device plugin, SR-IOV CNI and Intel's device plugins, and
// Debian carries QAT's userspace libraries only.
var unservedWhy = map[string]string{
	DeviceSRIOV: "the BPA places it only on a host whose NIC offers SR-IOV virtual functions, but this stick carries no SR-IOV network device plugin " +
		"and no SR-IOV CNI (neither can be built from what this stick's builder reaches), so no pod can request a virtual function",
	DeviceQAT: "the BPA places it only on a host with an Intel QAT device, but this stick carries no QAT device plugin " +
		"(Intel's device plugins cannot be built from what this stick's builder reaches, and Debian carries QAT's userspace libraries only), so no pod can request a QAT device",
}

// Devices are the devices a host's requirements ask for, in a fixed order.
func (r Requirements) Devices() []string {
	var out []string
	if r.SRIOV {
		out = append(out, DeviceSRIOV)
	}
	if r.QAT {
		out = append(out, DeviceQAT)
	}
	return out
}

// Unserved says what host asks for (devices, as Devices names them) that
// no device plugin on this stick serves, one sentence per device; field
// is the host's path in the site, or "" where the site is not at hand.
func Unserved(host, field string, devices []string) []string {
	var out []string
	for _, d := range devices {
		where := ""
		if field != "" {
			where = " (" + field + "." + d + ")"
		}
		out = append(out, fmt.Sprintf("%s requires %s%s: %s", host, deviceName(d), where, unservedWhy[d]))
	}
	return out
}

func deviceName(d string) string {
	if d == DeviceSRIOV {
		return "SR-IOV"
	}
	return "QAT"
}

// Notes are what the site asks that this stick accepts but cannot fully
// serve: validate and the site step say them, and status keeps saying
// them (see Unserved).
func (s *Site) Notes() []string {
	var out []string
	for i, h := range s.Hosts {
		out = append(out, Unserved(h.Name, field.NewPath("hosts").Index(i).Child("requirements").String(), h.Requirements.Devices())...)
	}
	return out
}
