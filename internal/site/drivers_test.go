package site

import (
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// TestStickIronicIsRunIronic: StickIronic lists exactly the hardware types
// and boot interfaces that the stick's Ironic enables, so the site file
// accepts a scheme exactly when that Ironic drives it.
func TestStickIronicIsRunIronic(t *testing.T) {
	data, err := os.ReadFile("../../images/ironic/usr/local/bin/run-ironic")
	if err != nil {
		t.Fatal(err)
	}
	enabled := func(option string) []string {
		m := regexp.MustCompile(`(?m)^` + option + ` = (.*)$`).FindStringSubmatch(string(data))
		if m == nil {
			t.Fatalf("run-ironic sets no %s", option)
		}
		out := strings.Split(strings.TrimSpace(m[1]), ",")
		sort.Strings(out)
		return out
	}
	for _, c := range []struct {
		option string
		ours   []string
	}{
		{"enabled_hardware_types", StickIronic.HardwareTypes},
		{"enabled_boot_interfaces", StickIronic.BootInterfaces},
	} {
		ours := slices.Sorted(slices.Values(c.ours))
		if got := enabled(c.option); !slices.Equal(got, ours) {
			t.Errorf("run-ironic's %s is %v; internal/site says %v", c.option, got, ours)
		}
	}
}

// TestBMCSchemes: the schemes this stick drives, and why each other one
// is refused.
func TestBMCSchemes(t *testing.T) {
	if want := []string{"idrac-redfish", "idrac-virtualmedia", "ipmi", "redfish", "redfish-virtualmedia"}; !slices.Equal(BMCSchemes, want) {
		t.Errorf("BMCSchemes = %v, want %v", BMCSchemes, want)
	}
	for scheme, want := range map[string]string{
		"ipmi":                 "",
		"redfish":              "",
		"redfish-virtualmedia": "",
		"idrac-redfish":        "",
		"idrac-virtualmedia":   "",
		"idrac":                "dropped its iDRAC WS-Man driver",
		"ilo5":                 "dropped its iLO 5 driver",
		"irmc":                 "dropped its iRMC driver",
		"ipmii":                "not a BMC scheme",
	} {
		if got := StickIronic.Refuses(scheme); want == "" && got != "" || !strings.Contains(got, want) {
			t.Errorf("%s: refused %q, want %q", scheme, got, want)
		}
	}
	// A stick whose Ironic has no virtual-media boot interface and no
	// idrac hardware type (this project's sticks before virtual media)
	// refuses those schemes, and says what is missing.
	pxeOnly := Ironic{HardwareTypes: []string{"ipmi", "redfish"}, BootInterfaces: []string{"ipxe", "pxe"}}
	if got, want := pxeOnly.Schemes(), []string{"ipmi", "redfish"}; !slices.Equal(got, want) {
		t.Errorf("a PXE-only stick drives %v, want %v", got, want)
	}
	for scheme, want := range map[string]string{
		"redfish-virtualmedia": "this stick's Ironic has no redfish-virtual-media boot interface",
		"idrac-redfish":        "this stick's Ironic has no idrac hardware type",
		"idrac-virtualmedia":   "this stick's Ironic has no idrac hardware type",
	} {
		if got := pxeOnly.Refuses(scheme); got != want {
			t.Errorf("a PXE-only stick: %s refused %q, want %q", scheme, got, want)
		}
	}
}

// TestBMCDrivers: the operator's parser gives each scheme the hardware
// type and boot interface Ironic registers it with.
func TestBMCDrivers(t *testing.T) {
	want := map[string]driver{
		"ipmi":                 {"ipmi", "ipxe"},
		"redfish":              {"redfish", "ipxe"},
		"redfish-virtualmedia": {"redfish", "redfish-virtual-media"},
		"idrac-redfish":        {"idrac", "ipxe"},
		"idrac-virtualmedia":   {"idrac", "idrac-redfish-virtual-media"},
	}
	for scheme, w := range want {
		if got := bmcDrivers[scheme]; got != w {
			t.Errorf("%s: %+v, want %+v", scheme, got, w)
		}
	}
	if len(bmcDrivers) != len(want) {
		t.Errorf("bmcDrivers = %v", bmcDrivers)
	}
}

// TestBMCDriverOfAddress: status shows what the operator registers each
// address with.
func TestBMCDriverOfAddress(t *testing.T) {
	for addr, want := range map[string][2]string{
		"ipmi://172.22.0.2:6230":                                 {"ipmi", "ipxe"},
		"redfish+https://10.0.0.5/redfish/v1/Systems/1":          {"redfish", "ipxe"},
		"redfish-virtualmedia://10.0.0.5/redfish/v1/Systems/1":   {"redfish", "redfish-virtual-media"},
		"idrac-virtualmedia://10.0.0.5/redfish/v1/Systems/S.E.1": {"idrac", "idrac-redfish-virtual-media"},
		"irmc://10.0.0.5": {"", ""},
	} {
		if hw, boot := BMCDriver(addr); hw != want[0] || boot != want[1] {
			t.Errorf("BMCDriver(%s) = %s, %s; want %s, %s", addr, hw, boot, want[0], want[1])
		}
	}
}
