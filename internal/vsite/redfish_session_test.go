package vsite

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A session unused for the SessionService's SessionTimeout ends: its
// token is refused with 401 and the session is gone from the list; a
// session in use lives on. The BMC's clock is a fake that the test moves.
func TestRedfishBMCSessionTimeout(t *testing.T) {
	m := Machine{Name: "node-0", MAC: "52:54:00:b0:0e:81", BMCUser: "admin", BMCPassword: "pw", BMC: BMCRedfish}
	var elapsed atomic.Int64 // nanoseconds since start
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	cl, _ := testBMC(t, m, &fakeMachine{st: machineState{MACs: []string{m.MAC}}}, func(b *redfishBMC) {
		b.now = func() time.Time { return start.Add(time.Duration(elapsed.Load())) }
	})
	if a := cl.do(t, "GET", "/redfish/v1/SessionService", nil); get(a.body, "SessionTimeout") != 1800.0 {
		t.Errorf("SessionTimeout %v, want 1800 (30 minutes)", get(a.body, "SessionTimeout"))
	}
	tokens, paths := map[string]string{}, map[string]string{}
	for _, name := range []string{"busy", "idle"} {
		a := cl.do(t, "POST", sessionsPath, map[string]string{"UserName": m.BMCUser, "Password": m.BMCPassword})
		tokens[name], paths[name] = a.header.Get("X-Auth-Token"), a.header.Get("Location")
	}
	sys := systemPath(m.Name)
	for _, s := range []struct {
		after   time.Duration // since the step before
		session string        // whose token the request has; "" is basic auth
		path    string
		want    int
	}{
		{29 * time.Minute, "busy", sys, 200},
		{29 * time.Minute, "busy", sys, 200},
		{30 * time.Minute, "busy", sys, 200}, // unused for exactly the timeout
		{0, "idle", sys, 401},                // unused for 88 minutes
		{0, "", "<idle>", 404},
		{0, "", "<busy>", 200},
		{30*time.Minute + time.Second, "busy", sys, 401},
		{0, "", sys, 200}, // the user and password still work
	} {
		elapsed.Add(int64(s.after))
		c := *cl
		c.token = tokens[s.session]
		path := s.path
		if p, ok := strings.CutPrefix(path, "<"); ok {
			path = paths[strings.TrimSuffix(p, ">")]
		}
		a := c.do(t, "GET", path, nil)
		if a.status != s.want {
			t.Errorf("at %v, GET %s with session %q: %d, want %d", time.Duration(elapsed.Load()), path, s.session, a.status, s.want)
		}
		if s.want == 401 && get(a.body, "error", "message") == nil {
			t.Errorf("at %v: a 401 without a Redfish error", time.Duration(elapsed.Load()))
		}
	}
	list := cl.do(t, "GET", sessionsPath, nil)
	if get(list.body, "Members@odata.count") != 0.0 {
		t.Errorf("sessions left: %v", get(list.body, "Members"))
	}
}
