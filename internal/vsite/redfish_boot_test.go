package vsite

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// A Once boot override is used up by the machine's next start (a new
// power-on, not a reboot in the same machine): it becomes Disabled and the
// machine boots what it booted before it, or the Continuous target set
// before it, from then on. A Continuous override stays.
func TestRedfishBMCBootOverride(t *testing.T) {
	type step struct {
		do   string // "Once Cd", "Continuous", "Hdd" … (a PATCH of what it names), or a ResetType
		want string // after it: the machine's first boot device and BootSourceOverrideEnabled
	}
	for _, c := range []struct {
		name  string
		on    bool // the machine runs at the start; it boots Pxe first
		steps []step
	}{
		{"Once is used by the next power-on", false, []step{
			{"Once Cd", "Cd Once"}, {"On", "Pxe Disabled"}, {"ForceRestart", "Pxe Disabled"}}},
		{"Continuous stays", false, []step{
			{"Continuous Cd", "Cd Continuous"}, {"On", "Cd Continuous"}, {"ForceRestart", "Cd Continuous"}}},
		{"Once goes back to the Continuous target", false, []step{
			{"Continuous Hdd", "Hdd Continuous"}, {"Once Cd", "Cd Once"}, {"On", "Hdd Disabled"}, {"ForceRestart", "Hdd Disabled"}}},
		// Ironic leaves out BootSourceOverrideEnabled when it is as it wants it.
		{"Once changed before it is used", false, []step{
			{"Once Cd", "Cd Once"}, {"Once Hdd", "Hdd Once"}, {"Cd", "Cd Once"}, {"ForceRestart", "Pxe Disabled"}}},
		{"Once made Continuous", false, []step{
			{"Once Cd", "Cd Once"}, {"Continuous", "Cd Continuous"}, {"On", "Cd Continuous"}}},
		{"Once called off", false, []step{
			{"Once Cd", "Cd Once"}, {"Disabled", "Pxe Disabled"}, {"On", "Pxe Disabled"}}},
		{"GracefulRestart of a machine that is off starts it", false, []step{
			{"Once Hdd", "Hdd Once"}, {"GracefulRestart", "Pxe Disabled"}}},
		{"no start, no use", true, []step{
			{"Once Cd", "Cd Once"}, {"GracefulRestart", "Cd Once"}, {"On", "Cd Once"}, {"Nmi", "Cd Once"},
			{"GracefulShutdown", "Cd Once"}, {"ForceOn", "Pxe Disabled"}}},
		{"ForceRestart of a running machine", true, []step{
			{"Once Cd", "Cd Once"}, {"ForceRestart", "Pxe Disabled"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := Machine{Name: "node-0", MAC: "52:54:00:b0:0e:61", BMCUser: "admin", BMCPassword: "pw", BMC: BMCRedfish}
			fake := &fakeMachine{st: machineState{BootTarget: bootPxe, PowerOn: c.on, MACs: []string{m.MAC}}}
			cl, _ := testBMC(t, m, fake)
			sys := systemPath(m.Name)
			etag, before := cl.do(t, "GET", sys, nil).header.Get("ETag"), "Pxe Continuous"
			for _, s := range c.steps {
				var a answer
				if f := strings.Fields(s.do); slices.Contains(bootEnabled, f[0]) || slices.Contains(bootTargets, f[0]) {
					boot := map[string]string{}
					for _, v := range f {
						if slices.Contains(bootEnabled, v) {
							boot["BootSourceOverrideEnabled"] = v
						} else {
							boot["BootSourceOverrideTarget"] = v
						}
					}
					a = cl.do(t, "PATCH", sys, map[string]any{"Boot": boot})
				} else {
					a = cl.do(t, "POST", sys+"/Actions/ComputerSystem.Reset", map[string]string{"ResetType": s.do})
				}
				if a.status != 204 {
					t.Fatalf("%s: %d %v", s.do, a.status, get(a.body, "error", "message"))
				}
				st, _ := fake.State(context.Background())
				sy := cl.do(t, "GET", sys, nil)
				shown := fmt.Sprintf("%v %v", get(sy.body, "Boot", "BootSourceOverrideTarget"), get(sy.body, "Boot", "BootSourceOverrideEnabled"))
				if got := fmt.Sprintf("%s %v", st.BootTarget, get(sy.body, "Boot", "BootSourceOverrideEnabled")); got != s.want || shown != s.want {
					t.Errorf("after %s: the machine boots %q first, the System says %q; want %q", s.do, got, shown, s.want)
				}
				// The ETag changes with the boot settings, a start's
				// change included, and only with them.
				if tag := sy.header.Get("ETag"); (tag != etag) != (shown != before) {
					t.Errorf("after %s (boot %q, before %q): ETag %s, before %s", s.do, shown, before, tag, etag)
				}
				etag, before = sy.header.Get("ETag"), shown
			}
		})
	}
}
