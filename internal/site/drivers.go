package site

import (
	"fmt"
	"slices"
	"sort"
)

// driver is what Ironic needs to drive a BMC address scheme as the
// baremetal-operator registers it: the node's hardware type and its boot
// interface (pkg/hardwareutils/bmc of BMO).
type driver struct {
	hardwareType, bootInterface string
}

// bmcDrivers are the schemes the baremetal-operator knows.
var bmcDrivers = map[string]driver{
	"ipmi":                 {"ipmi", "ipxe"},
	"redfish":              {"redfish", "ipxe"},
	"redfish-virtualmedia": {"redfish", "redfish-virtual-media"},
	"idrac":                {"idrac", "ipxe"},
	"idrac-redfish":        {"idrac", "ipxe"},
	"idrac-virtualmedia":   {"idrac", "idrac-redfish-virtual-media"},
}

// goneSchemes are schemes the baremetal-operator no longer knows.
var goneSchemes = map[string]string{
	"ilo4": "current Metal3 dropped its iLO 4 driver: use redfish:// (iLO 4 speaks Redfish from firmware 2.50)",
	"ilo5": "current Metal3 dropped its iLO 5 driver: use redfish://",
	"irmc": "current Metal3 dropped its iRMC driver: use redfish://",
}

// StickIronic is what the stick's Ironic enables: the enabled hardware
// types and boot interfaces of images/ironic/usr/local/bin/run-ironic (a
// test keeps the two in step). A site may name only schemes it drives.
var StickIronic = struct {
	HardwareTypes, BootInterfaces []string
}{
	HardwareTypes:  []string{"ipmi", "redfish", "fake-hardware"},
	BootInterfaces: []string{"ipxe", "pxe", "fake"},
}

// BMCSchemes are the BMC address schemes this stick's Ironic drives.
var BMCSchemes = func() []string {
	var out []string
	for scheme, d := range bmcDrivers {
		if slices.Contains(StickIronic.HardwareTypes, d.hardwareType) && slices.Contains(StickIronic.BootInterfaces, d.bootInterface) {
			out = append(out, scheme)
		}
	}
	sort.Strings(out)
	return out
}()

// schemeRefused says why a scheme is refused ("" when this stick drives
// it).
func schemeRefused(scheme string) string {
	if why, ok := goneSchemes[scheme]; ok {
		return why
	}
	d, ok := bmcDrivers[scheme]
	switch {
	case !ok:
		return "not a BMC scheme"
	case !slices.Contains(StickIronic.HardwareTypes, d.hardwareType):
		return fmt.Sprintf("this stick's Ironic has no %s hardware type", d.hardwareType)
	case !slices.Contains(StickIronic.BootInterfaces, d.bootInterface):
		return fmt.Sprintf("this stick's Ironic has no %s boot interface", d.bootInterface)
	}
	return ""
}
