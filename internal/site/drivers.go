package site

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/metal3-io/baremetal-operator/pkg/hardwareutils/bmc"
)

// driver is what Ironic needs to drive a BMC address scheme as the
// baremetal-operator registers it: the node's hardware type and its boot
// interface.
type driver struct {
	hardwareType, bootInterface string
}

// siteSchemes are the BMC address schemes a site may name, each a scheme
// of the baremetal-operator the stick deploys. (BMO also knows libvirt,
// ilo5-redfish, ilo5-virtualmedia and redfish-uefihttp, which bootstick
// does not offer.)
var siteSchemes = []string{"ipmi", "redfish", "redfish-virtualmedia", "idrac-redfish", "idrac-virtualmedia"}

// bmcDrivers maps each site scheme to its driver, as BMO's own parser
// (pkg/hardwareutils/bmc) decides it. A scheme the parser does not know
// is left out, and so refused (TestBMCDrivers holds the list).
var bmcDrivers = func() map[string]driver {
	out := map[string]driver{}
	for _, scheme := range siteSchemes {
		if hw, boot := BMCDriver(scheme + "://192.0.2.1/redfish/v1/Systems/1"); hw != "" {
			out[scheme] = driver{hw, boot}
		}
	}
	return out
}()

// goneSchemes are schemes the baremetal-operator no longer knows.
var goneSchemes = map[string]string{
	"ilo4":  "current Metal3 dropped its iLO 4 driver: use redfish:// (iLO 4 speaks Redfish from firmware 2.50)",
	"ilo5":  "current Metal3 dropped its iLO 5 driver: use redfish://",
	"irmc":  "current Metal3 dropped its iRMC driver: use redfish://",
	"idrac": "current Metal3 dropped its iDRAC WS-Man driver: use redfish:// (an iDRAC speaks Redfish)",
}

// Ironic is what an Ironic enables: its hardware types and boot
// interfaces.
type Ironic struct {
	HardwareTypes, BootInterfaces []string
}

// StickIronic is what the stick's Ironic enables: the enabled hardware
// types and boot interfaces of images/ironic/usr/local/bin/run-ironic (a
// test keeps the two in step). A site may name only schemes it drives.
var StickIronic = Ironic{
	HardwareTypes:  []string{"ipmi", "redfish", "idrac", "fake-hardware"},
	BootInterfaces: []string{"ipxe", "pxe", "redfish-virtual-media", "idrac-redfish-virtual-media", "fake"},
}

// BMCSchemes are the BMC address schemes this stick's Ironic drives.
var BMCSchemes = StickIronic.Schemes()

// Schemes are the BMC address schemes this Ironic drives.
func (ir Ironic) Schemes() []string {
	var out []string
	for scheme := range bmcDrivers {
		if ir.Refuses(scheme) == "" {
			out = append(out, scheme)
		}
	}
	sort.Strings(out)
	return out
}

// Refuses says why this Ironic cannot drive a scheme ("" when it can).
func (ir Ironic) Refuses(scheme string) string {
	if why, ok := goneSchemes[scheme]; ok {
		return why
	}
	d, ok := bmcDrivers[scheme]
	switch {
	case !ok:
		return "not a BMC scheme"
	case !slices.Contains(ir.HardwareTypes, d.hardwareType):
		return fmt.Sprintf("this stick's Ironic has no %s hardware type", d.hardwareType)
	case !slices.Contains(ir.BootInterfaces, d.bootInterface):
		return fmt.Sprintf("this stick's Ironic has no %s boot interface", d.bootInterface)
	}
	return ""
}

// BMCDriver is how the baremetal-operator registers a BMC address with
// Ironic: the hardware type and the boot interface ("" and "" for an
// address it does not parse).
func BMCDriver(address string) (hardwareType, bootInterface string) {
	acc, err := bmc.NewAccessDetails(address, false)
	if err != nil {
		return "", ""
	}
	return acc.Driver(), acc.BootInterface()
}

// VirtualMedia says whether a BMC address boots its host by virtual media
// (the BMC mounts an ISO Ironic builds), not by PXE.
func VirtualMedia(address string) bool {
	_, boot := BMCDriver(address)
	return strings.HasSuffix(boot, "virtual-media")
}

// RamdiskNetworkData says whether a host's deploy ramdisk takes its
// network from the host's network data: it boots by virtual media and has
// network data, which Ironic puts on the ISO (as network_data.json, the
// form the site's is converted to). Any other host's ramdisk asks for
// DHCP.
func RamdiskNetworkData(address string, networkData map[string]any) bool {
	return VirtualMedia(address) && len(networkData) > 0
}
