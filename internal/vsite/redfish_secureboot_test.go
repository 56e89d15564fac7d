package vsite

import (
	"testing"
)

// TestRedfishBMCSecureBoot makes the calls Ironic makes (through sushy)
// for a UEFISecureBoot node: the System links its SecureBoot resource,
// which says what the firmware does now and from the next start; a PATCH
// of SecureBootEnable with the resource's ETag changes the setting, and
// the machine's next start takes it. A stale ETag and other fields are
// refused; a machine whose firmware has no Secure Boot has no such
// resource.
func TestRedfishBMCSecureBoot(t *testing.T) {
	m := Machine{Name: "node-0", MAC: "52:54:00:b0:0e:71", BMCUser: "admin", BMCPassword: "pw", BMC: BMCRedfishVirtualMedia,
		Firmware: FirmwareUEFISecureBoot}
	fake := &fakeMachine{st: machineState{BootTarget: bootPxe, UEFI: true, MACs: []string{m.MAC},
		SecureBootCapable: true, SecureBoot: true, SecureBootCurrent: true}}
	c, _ := testBMC(t, m, fake)
	sb := systemPath(m.Name) + "/SecureBoot"
	if got := get(c.do(t, "GET", systemPath(m.Name), nil).body, "SecureBoot", "@odata.id"); got != sb {
		t.Fatalf("the System's SecureBoot link is %v, want %s", got, sb)
	}
	state := func(want string) string {
		t.Helper()
		a := c.do(t, "GET", sb, nil)
		if a.status != 200 {
			t.Fatalf("GET SecureBoot: %d %v", a.status, a.body)
		}
		got := ""
		for _, k := range []string{"SecureBootEnable", "SecureBootCurrentBoot", "SecureBootMode"} {
			got += " " + toString(get(a.body, k))
		}
		if got[1:] != want {
			t.Errorf("SecureBoot is %q, want %q", got[1:], want)
		}
		if a.header.Get("ETag") == "" || a.header.Get("ETag") != get(a.body, "@odata.etag") {
			t.Errorf("SecureBoot's ETag header %q and @odata.etag %v differ", a.header.Get("ETag"), get(a.body, "@odata.etag"))
		}
		return a.header.Get("ETag")
	}
	tag := state("true Enabled UserMode")

	if a := c.do(t, "PATCH", sb, map[string]any{"SecureBootEnable": false}, "If-Match", `W/"0000"`); a.status != 412 {
		t.Errorf("PATCH with a stale ETag: %d, want 412", a.status)
	}
	if a := c.do(t, "PATCH", sb, map[string]any{"SecureBootMode": "SetupMode"}); a.status != 400 {
		t.Errorf("PATCH of SecureBootMode: %d, want 400", a.status)
	}
	if a := c.do(t, "PATCH", sb, map[string]any{"SecureBootEnable": false}, "If-Match", tag); a.status != 204 {
		t.Fatalf("PATCH SecureBootEnable false: %d %v", a.status, a.body)
	}
	state("false Enabled UserMode") // until the machine starts again
	reset := func(typ string) {
		t.Helper()
		if a := c.do(t, "POST", systemPath(m.Name)+"/Actions/ComputerSystem.Reset", map[string]string{"ResetType": typ}); a.status != 204 {
			t.Fatalf("Reset %s: %d %v", typ, a.status, a.body)
		}
	}
	reset("On")
	state("false Disabled SetupMode")
	if a := c.do(t, "PATCH", sb, map[string]any{"SecureBootEnable": true}); a.status != 204 {
		t.Fatalf("PATCH SecureBootEnable true: %d %v", a.status, a.body)
	}
	reset("ForceRestart")
	state("true Enabled UserMode")

	plain := Machine{Name: "node-1", MAC: "52:54:00:b0:0e:72", BMCUser: "admin", BMCPassword: "pw", BMC: BMCRedfish, Firmware: FirmwareUEFI}
	c, _ = testBMC(t, plain, &fakeMachine{st: machineState{BootTarget: bootPxe, UEFI: true, MACs: []string{plain.MAC}}})
	if got := get(c.do(t, "GET", systemPath(plain.Name), nil).body, "SecureBoot"); got != nil {
		t.Errorf("a System without Secure Boot links %v", got)
	}
	for _, method := range []string{"GET", "PATCH"} {
		if a := c.do(t, method, systemPath(plain.Name)+"/SecureBoot", map[string]any{"SecureBootEnable": true}); a.status != 404 {
			t.Errorf("%s SecureBoot of a System without it: %d, want 404", method, a.status)
		}
	}
}

func toString(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case bool:
		if v {
			return "true"
		}
		return "false"
	}
	return "<missing>"
}
