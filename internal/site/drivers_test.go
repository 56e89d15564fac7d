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
	if want := []string{"ipmi", "redfish"}; !slices.Equal(BMCSchemes, want) {
		t.Errorf("BMCSchemes = %v, want %v", BMCSchemes, want)
	}
	for scheme, want := range map[string]string{
		"ipmi":                 "",
		"redfish":              "",
		"redfish-virtualmedia": "no redfish-virtual-media boot interface",
		"idrac":                "no idrac hardware type",
		"idrac-redfish":        "no idrac hardware type",
		"idrac-virtualmedia":   "no idrac hardware type",
		"ilo5":                 "dropped its iLO 5 driver",
		"irmc":                 "dropped its iRMC driver",
		"ipmii":                "not a BMC scheme",
	} {
		if got := schemeRefused(scheme); want == "" && got != "" || !strings.Contains(got, want) {
			t.Errorf("%s: refused %q, want %q", scheme, got, want)
		}
	}
}
