package vsite

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
)

// fakeMachine is a machine in memory for the BMC's unit tests.
type fakeMachine struct {
	mu sync.Mutex
	st machineState
}

func (f *fakeMachine) State(ctx context.Context) (machineState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.st
	st.MACs = slices.Clone(f.st.MACs)
	return st, nil
}

// Reset starts the machine as libvirtMachine does: On, ForceOn and
// GracefulRestart of a machine that is off, and ForceRestart.
func (f *fakeMachine) Reset(ctx context.Context, resetType string) (started bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	wasOn := f.st.PowerOn
	switch resetType {
	case "On", "ForceOn", "GracefulRestart":
		f.st.PowerOn = true
		if !wasOn {
			f.st.SecureBootCurrent = f.st.SecureBoot
		}
		return !wasOn, nil
	case "ForceRestart":
		f.st.PowerOn = true
		f.st.SecureBootCurrent = f.st.SecureBoot
		return true, nil
	case "ForceOff", "GracefulShutdown":
		f.st.PowerOn = false
	}
	return false, nil
}

func (f *fakeMachine) SetBootTarget(ctx context.Context, target string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.st.BootTarget = target
	return nil
}

// SetSecureBoot changes the setting, which the machine's next start
// (Reset) takes.
func (f *fakeMachine) SetSecureBoot(ctx context.Context, on bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.st.SecureBootCapable {
		return fmt.Errorf("no Secure Boot")
	}
	f.st.SecureBoot = on
	return nil
}

func (f *fakeMachine) SetMedia(ctx context.Context, file string) error {
	if file != "" {
		if _, err := os.Stat(file); err != nil {
			return err
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.st.Media = file
	return nil
}

// redfishClient calls a BMC as sushy does: JSON bodies, OData-Version,
// and a session token or basic auth.
type redfishClient struct {
	base  string
	http  *http.Client
	user  string
	pass  string
	token string // used, when set, instead of basic auth
}

func newRedfishClient(t *testing.T, base string, caPEM []byte, user, pass string) *redfishClient {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("the site's BMC CA is no PEM certificate")
	}
	return &redfishClient{base: base, user: user, pass: pass,
		http: &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, Proxy: nil}}}
}

type answer struct {
	status int
	header http.Header
	body   map[string]any
}

func (c *redfishClient) do(t *testing.T, method, path string, body any, header ...string) answer {
	t.Helper()
	var rd io.Reader
	if body != nil {
		data, _ := json.Marshal(body)
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("OData-Version", "4.0")
	switch {
	case c.token != "":
		req.Header.Set("X-Auth-Token", c.token)
	case c.user != "":
		req.SetBasicAuth(c.user, c.pass)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.http.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	a := answer{status: resp.StatusCode, header: resp.Header}
	data, _ := io.ReadAll(resp.Body)
	if len(data) > 0 {
		if err := json.Unmarshal(data, &a.body); err != nil {
			t.Errorf("%s %s: the answer is no JSON object: %v\n%s", method, path, err, data)
		}
	}
	return a
}

// get is the value at a path of keys (and list indexes) in a JSON answer.
func get(v any, keys ...any) any {
	for _, k := range keys {
		switch k := k.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			l, _ := v.([]any)
			if k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func has(list any, want string) bool {
	l, _ := list.([]any)
	for _, v := range l {
		if v == want {
			return true
		}
	}
	return false
}

// imageServer serves one image for InsertMedia.
func imageServer(t *testing.T, image []byte) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/images/boot.iso" {
			http.NotFound(w, r)
			return
		}
		w.Write(image)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/images/boot.iso"
}

// driveRedfish makes the calls Ironic makes through sushy (redfish
// power, management and boot, redfish-virtual-media) to the BMC of m, in
// order, and checks each answer and what it did to the machine, which
// machine reads. after, if set, checks more after each step.
func driveRedfish(t *testing.T, c *redfishClient, m Machine, imageURL string, image []byte, machine func() machineState, after func(step string)) {
	sys := systemPath(m.Name)
	mode := map[string]string{FirmwareBIOS: "Legacy", FirmwareUEFI: "UEFI", FirmwareUEFISecureBoot: "UEFI"}[m.Firmware]
	otherMode := map[string]string{FirmwareBIOS: "UEFI", FirmwareUEFI: "Legacy"}[m.Firmware]
	var etag, session, firstTarget string
	type step struct {
		name, method, path string
		body               any
		auth               string // basic (the default), session, none, wrong
		header             []string
		want               int
		check              func(a answer)
	}
	steps := []step{
		{name: "service root", method: "GET", path: redfishRoot, auth: "none", want: 200, check: func(a answer) {
			for _, k := range []string{"RedfishVersion", "UUID"} {
				if get(a.body, k) == nil {
					t.Errorf("service root without %s", k)
				}
			}
			for k, want := range map[string]string{"Systems": "/redfish/v1/Systems", "Managers": "/redfish/v1/Managers",
				"Chassis": "/redfish/v1/Chassis", "SessionService": "/redfish/v1/SessionService"} {
				if got := get(a.body, k, "@odata.id"); got != want {
					t.Errorf("service root %s: %v", k, got)
				}
			}
			if got := get(a.body, "Links", "Sessions", "@odata.id"); got != sessionsPath {
				t.Errorf("service root Links.Sessions: %v", got)
			}
		}},
		{name: "no credentials", method: "GET", path: sys, auth: "none", want: 401},
		{name: "wrong password", method: "GET", path: sys, auth: "wrong", want: 401, check: func(a answer) {
			if get(a.body, "error", "message") == nil {
				t.Error("a 401 without a Redfish error")
			}
		}},
		{name: "session with a wrong password", method: "POST", path: sessionsPath, auth: "none",
			body: map[string]string{"UserName": c.user, "Password": "wrong-" + c.pass}, want: 401},
		{name: "create session", method: "POST", path: sessionsPath, auth: "none",
			body: map[string]string{"UserName": c.user, "Password": c.pass}, want: 201, check: func(a answer) {
				session = a.header.Get("X-Auth-Token")
				if session == "" || !strings.HasPrefix(a.header.Get("Location"), sessionsPath+"/") {
					t.Errorf("session: X-Auth-Token %d bytes, Location %q", len(session), a.header.Get("Location"))
				}
				if get(a.body, "@odata.id") != a.header.Get("Location") {
					t.Errorf("session body %v", a.body)
				}
			}},
		{name: "systems", method: "GET", path: "/redfish/v1/Systems", auth: "session", want: 200, check: func(a answer) {
			if get(a.body, "Members", 0, "@odata.id") != sys || get(a.body, "Members@odata.count") != 1.0 {
				t.Errorf("systems %v", a.body)
			}
		}},
		{name: "get system", method: "GET", path: sys, auth: "session", want: 200, check: func(a answer) {
			etag = a.header.Get("ETag")
			firstTarget, _ = get(a.body, "Boot", "BootSourceOverrideTarget").(string)
			for _, c := range []struct {
				keys []any
				want any
			}{
				{[]any{"Id"}, m.Name},
				{[]any{"PowerState"}, "Off"},
				{[]any{"Boot", "BootSourceOverrideMode"}, mode},
				{[]any{"Actions", "#ComputerSystem.Reset", "target"}, sys + "/Actions/ComputerSystem.Reset"},
				{[]any{"Links", "ManagedBy", 0, "@odata.id"}, managerPath},
				{[]any{"Links", "Chassis", 0, "@odata.id"}, chassisPath},
				{[]any{"EthernetInterfaces", "@odata.id"}, sys + "/EthernetInterfaces"},
				{[]any{"ProcessorSummary", "Count"}, float64(m.CPUs)},
				{[]any{"MemorySummary", "TotalSystemMemoryGiB"}, float64(m.MemoryMiB) / 1024},
			} {
				if got := get(a.body, c.keys...); got != c.want {
					t.Errorf("system %v: %v, want %v", c.keys, got, c.want)
				}
			}
			for _, v := range []string{"Pxe", "Hdd", "Cd"} {
				if !has(get(a.body, "Boot", "BootSourceOverrideTarget@Redfish.AllowableValues"), v) {
					t.Errorf("boot target %s is not allowed", v)
				}
			}
			for _, v := range []string{"On", "ForceOff", "GracefulShutdown", "GracefulRestart", "ForceRestart", "Nmi"} {
				if !has(get(a.body, "Actions", "#ComputerSystem.Reset", "ResetType@Redfish.AllowableValues"), v) {
					t.Errorf("reset %s is not allowed", v)
				}
			}
			if etag == "" || get(a.body, "@odata.etag") != etag || get(a.body, "UUID") == "" {
				t.Errorf("system: ETag %q, UUID %v", etag, get(a.body, "UUID"))
			}
		}},
		{name: "ethernet interfaces", method: "GET", path: sys + "/EthernetInterfaces", want: 200, check: func(a answer) {
			if got := get(a.body, "Members@odata.count"); got != float64(1+len(m.ExtraMACs)) {
				t.Errorf("%v NICs, want %d", got, 1+len(m.ExtraMACs))
			}
			nic := c.do(t, "GET", get(a.body, "Members", 0, "@odata.id").(string), nil)
			if get(nic.body, "MACAddress") != m.MAC {
				t.Errorf("the first NIC is %v, want the boot NIC %s", get(nic.body, "MACAddress"), m.MAC)
			}
		}},
		{name: "simple storage", method: "GET", path: sys + "/SimpleStorage/" + storageID, want: 200, check: func(a answer) {
			if got := get(a.body, "Devices", 0, "CapacityBytes"); got != float64(int64(m.DiskGiB)<<30) {
				t.Errorf("disk of %v bytes", got)
			}
		}},
		{name: "boot mode of the other firmware", method: "PATCH", path: sys,
			body: map[string]any{"Boot": map[string]string{"BootSourceOverrideMode": otherMode}}, want: 400},
		{name: "boot target not allowed", method: "PATCH", path: sys,
			body: map[string]any{"Boot": map[string]string{"BootSourceOverrideTarget": "Floppy"}}, want: 400},
		{name: "patch other than Boot", method: "PATCH", path: sys, body: map[string]any{"IndicatorLED": "Lit"}, want: 400},
		{name: "boot override Cd", method: "PATCH", path: sys, header: []string{"If-Match", "<etag>"},
			body: map[string]any{"Boot": map[string]string{"BootSourceOverrideTarget": "Cd", "BootSourceOverrideEnabled": "Once"}}, want: 204, check: func(a answer) {
				if got := machine().BootTarget; got != "Cd" {
					t.Errorf("the machine boots %s first, want Cd", got)
				}
				s := c.do(t, "GET", sys, nil)
				if get(s.body, "Boot", "BootSourceOverrideTarget") != "Cd" || get(s.body, "Boot", "BootSourceOverrideEnabled") != "Once" {
					t.Errorf("after the override, Boot is %v", get(s.body, "Boot"))
				}
			}},
		{name: "stale ETag", method: "PATCH", path: sys, header: []string{"If-Match", "<etag>"},
			body: map[string]any{"Boot": map[string]string{"BootSourceOverrideTarget": "Pxe"}}, want: 412},
		{name: "power on", method: "POST", path: sys + "/Actions/ComputerSystem.Reset", auth: "session",
			body: map[string]string{"ResetType": "On"}, want: 204, check: func(a answer) {
				if !machine().PowerOn {
					t.Error("On left the machine off")
				}
				s := c.do(t, "GET", sys, nil)
				if get(s.body, "PowerState") != "On" {
					t.Errorf("PowerState %v after On", get(s.body, "PowerState"))
				}
				// The start used the Once override up.
				if got := machine().BootTarget; got != firstTarget || get(s.body, "Boot", "BootSourceOverrideEnabled") != "Disabled" {
					t.Errorf("after On the machine boots %s first (want %s again), Boot %v", got, firstTarget, get(s.body, "Boot"))
				}
			}},
		{name: "reset type not allowed", method: "POST", path: sys + "/Actions/ComputerSystem.Reset",
			body: map[string]string{"ResetType": "PushPowerButton"}, want: 400},
		{name: "managers", method: "GET", path: "/redfish/v1/Managers", want: 200, check: func(a answer) {
			if get(a.body, "Members", 0, "@odata.id") != managerPath {
				t.Errorf("managers %v", a.body)
			}
		}},
		{name: "manager", method: "GET", path: managerPath, auth: "session", want: 200, check: func(a answer) {
			if get(a.body, "VirtualMedia", "@odata.id") != managerPath+"/VirtualMedia" || get(a.body, "Links", "ManagerForServers", 0, "@odata.id") != sys {
				t.Errorf("manager %v", a.body)
			}
		}},
		{name: "virtual media", method: "GET", path: managerPath + "/VirtualMedia", want: 200, check: func(a answer) {
			if get(a.body, "Members", 0, "@odata.id") != virtualCDPath {
				t.Errorf("virtual media %v", a.body)
			}
		}},
		{name: "virtual CD", method: "GET", path: virtualCDPath, want: 200, check: func(a answer) {
			if !has(get(a.body, "MediaTypes"), "CD") || !has(get(a.body, "MediaTypes"), "DVD") || get(a.body, "Inserted") != false {
				t.Errorf("virtual CD %v", a.body)
			}
			if get(a.body, "Actions", "#VirtualMedia.InsertMedia", "target") != insertMediaPath ||
				get(a.body, "Actions", "#VirtualMedia.EjectMedia", "target") != ejectMediaPath {
				t.Errorf("virtual CD actions %v", get(a.body, "Actions"))
			}
		}},
		{name: "insert media", method: "POST", path: insertMediaPath, auth: "session",
			body: map[string]any{"Image": imageURL}, want: 204, check: func(a answer) {
				file := machine().Media
				if data, err := os.ReadFile(file); err != nil || !bytes.Equal(data, image) {
					t.Errorf("the machine's CD holds %q (%v), not the image", file, err)
				}
				cd := c.do(t, "GET", virtualCDPath, nil)
				if get(cd.body, "Inserted") != true || get(cd.body, "Image") != imageURL || get(cd.body, "ImageName") != "boot.iso" {
					t.Errorf("virtual CD after InsertMedia: %v", cd.body)
				}
			}},
		{name: "insert into a full drive", method: "POST", path: insertMediaPath, body: map[string]any{"Image": imageURL}, want: 400},
		{name: "eject media", method: "POST", path: ejectMediaPath, auth: "session", want: 204, check: func(a answer) {
			if got := machine().Media; got != "" {
				t.Errorf("the machine's CD holds %s after EjectMedia", got)
			}
			if cd := c.do(t, "GET", virtualCDPath, nil); get(cd.body, "Inserted") != false || get(cd.body, "Image") != nil {
				t.Errorf("virtual CD after EjectMedia: %v", cd.body)
			}
		}},
		{name: "insert an image that is not there", method: "POST", path: insertMediaPath,
			body: map[string]any{"Image": imageURL + ".missing"}, want: 400, check: func(a answer) {
				if msg, _ := get(a.body, "error", "message").(string); !strings.Contains(msg, "404") {
					t.Errorf("the error does not say why: %q", msg)
				}
			}},
		{name: "force off", method: "POST", path: sys + "/Actions/ComputerSystem.Reset",
			body: map[string]string{"ResetType": "ForceOff"}, want: 204, check: func(a answer) {
				if machine().PowerOn {
					t.Error("ForceOff left the machine on")
				}
			}},
		{name: "chassis", method: "GET", path: "/redfish/v1/Chassis", want: 200, check: func(a answer) {
			if get(a.body, "Members", 0, "@odata.id") != chassisPath {
				t.Errorf("chassis %v", a.body)
			}
			if ch := c.do(t, "GET", chassisPath, nil); ch.status != 200 || get(ch.body, "ChassisType") == nil {
				t.Errorf("chassis %d %v", ch.status, ch.body)
			}
		}},
		{name: "another system", method: "GET", path: "/redfish/v1/Systems/not-" + m.Name, want: 404},
		{name: "end session", method: "DELETE", path: "<session>", auth: "session", want: 204},
		{name: "ended session", method: "GET", path: sys, auth: "session", want: 401},
	}
	var location string
	for _, s := range steps {
		cl := *c
		switch s.auth {
		case "none":
			cl.user = ""
		case "wrong":
			cl.pass = "wrong-" + c.pass
		case "session":
			cl.token = session
		}
		path := s.path
		if path == "<session>" {
			path = location
		}
		var header []string
		for _, h := range s.header {
			header = append(header, strings.ReplaceAll(h, "<etag>", etag))
		}
		a := cl.do(t, s.method, path, s.body, header...)
		if s.name == "create session" {
			location = a.header.Get("Location")
		}
		if a.status != s.want {
			t.Errorf("%s: %s %s answered %d, want %d: %v", s.name, s.method, path, a.status, s.want, get(a.body, "error", "message"))
			continue
		}
		if s.check != nil {
			s.check(a)
		}
		if after != nil {
			after(s.name)
		}
	}
}

// testBMC serves m's BMC over HTTPS, each of set changing it first; it
// keeps images in the folder it returns.
func testBMC(t *testing.T, m Machine, drv machineDriver, set ...func(*redfishBMC)) (*redfishClient, string) {
	t.Helper()
	ca, err := newBMCCA([]netip.Addr{netip.MustParseAddr("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	mediaDir := t.TempDir()
	bmc := newRedfishBMC(m, drv, mediaDir)
	for _, f := range set {
		f(bmc)
	}
	srv := httptest.NewUnstartedServer(bmc)
	srv.TLS = ca.tlsConfig()
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return newRedfishClient(t, srv.URL, ca.pem, m.BMCUser, m.BMCPassword), mediaDir
}

func TestRedfishBMC(t *testing.T) {
	for _, fw := range []string{FirmwareBIOS, FirmwareUEFI} {
		t.Run(fw, func(t *testing.T) {
			m := Machine{Name: "node-0", MAC: "52:54:00:b0:0e:11", ExtraMACs: []string{"52:54:00:b0:0e:12"}, CPUs: 2, MemoryMiB: 256, DiskGiB: 8,
				BMCUser: "admin", BMCPassword: "pw-" + fw, Firmware: fw, BMC: BMCRedfish}
			fake := &fakeMachine{st: machineState{UUID: "6f1c9e1e-1111-4222-8333-444455556666", BootTarget: bootPxe, UEFI: fw == FirmwareUEFI,
				MACs: append([]string{m.MAC}, m.ExtraMACs...), CPUs: m.CPUs, MemoryMiB: m.MemoryMiB, DiskBytes: int64(m.DiskGiB) << 30}}
			c, _ := testBMC(t, m, fake)
			image := []byte("an ISO image for " + fw)
			inserted := ""
			driveRedfish(t, c, m, imageServer(t, image), image, func() machineState {
				st, _ := fake.State(context.Background())
				if st.Media != "" {
					inserted = st.Media
				}
				return st
			}, nil)
			if inserted == "" {
				t.Fatal("no image was inserted")
			}
			if _, err := os.Stat(inserted); !os.IsNotExist(err) {
				t.Errorf("EjectMedia left the image %s: %v", inserted, err)
			}
		})
	}
}

func TestRedfishBMCBroken(t *testing.T) {
	m := Machine{Name: "node-0", MAC: "52:54:00:b0:0e:21", BMCUser: "admin", BMCPassword: "pw", BMC: BMCRedfish, BMCBroken: true}
	c, _ := testBMC(t, m, &fakeMachine{})
	for _, r := range []struct{ method, path string }{
		{"GET", redfishRoot}, {"POST", sessionsPath}, {"GET", systemPath(m.Name)}, {"POST", systemPath(m.Name) + "/Actions/ComputerSystem.Reset"},
	} {
		if a := c.do(t, r.method, r.path, map[string]string{}); a.status != 500 || get(a.body, "error", "message") == nil {
			t.Errorf("%s %s on a broken BMC: %d %v", r.method, r.path, a.status, a.body)
		}
	}
}

// The basic auth user defaults to admin, as in the site file; the
// service root needs no credentials.
func TestRedfishBMCDefaultUser(t *testing.T) {
	m := Machine{Name: "node-0", MAC: "52:54:00:b0:0e:31", BMCPassword: "pw", BMC: BMCRedfish}
	c, _ := testBMC(t, m, &fakeMachine{})
	c.user = "admin"
	if a := c.do(t, "GET", "/redfish/v1/Managers", nil); a.status != 200 {
		t.Errorf("admin with the password: %d", a.status)
	}
	c.user = ""
	if a := c.do(t, "GET", "/redfish/v1", nil); a.status != 200 {
		t.Errorf("service root without credentials: %d", a.status)
	}
}

func TestBMCAddress(t *testing.T) {
	s := &Site{opts: Options{BMCAddr: netip.MustParseAddr("172.22.0.2")}}
	for _, c := range []struct {
		bmc, want string
	}{
		{"", "ipmi://172.22.0.2:6230"},
		{BMCIPMI, "ipmi://172.22.0.2:6230"},
		{BMCRedfish, "redfish+https://172.22.0.2:6230/redfish/v1/Systems/node-0"},
		{BMCRedfishVirtualMedia, "redfish-virtualmedia+https://172.22.0.2:6230/redfish/v1/Systems/node-0"},
	} {
		if got := s.BMCAddress(Machine{Name: "node-0", BMCPort: 6230, BMC: c.bmc}); got != c.want {
			t.Errorf("BMC %q: %s, want %s", c.bmc, got, c.want)
		}
	}
	own := Machine{Name: "node-1", BMCPort: 623, BMCAddr: netip.MustParseAddr("172.22.0.3")}
	if got, want := s.BMCAddress(own), "ipmi://172.22.0.3:623"; got != want {
		t.Errorf("a BMC with its own address: %s, want %s", got, want)
	}
}

func TestMachineCheck(t *testing.T) {
	ok := Machine{Name: "m", MAC: "52:54:00:00:00:01", Firmware: FirmwareBIOS, BMC: BMCRedfish, ExtraMACs: []string{"52:54:00:00:00:02"}}
	for _, c := range []struct {
		name   string
		change func(*Machine)
		taken  string // a MAC of another machine
		want   string // "" is no error
	}{
		{"fine", func(*Machine) {}, "", ""},
		{"firmware", func(m *Machine) { m.Firmware = "coreboot" }, "", "firmware"},
		{"bmc", func(m *Machine) { m.BMC = "ipmii" }, "", "BMC"},
		{"broken ipmi", func(m *Machine) { m.BMC, m.BMCBroken = BMCIPMI, true }, "", "broken"},
		{"colon in the Redfish user", func(m *Machine) { m.BMCUser = "ad:min" }, "", "colon"},
		{"extra is the boot NIC", func(m *Machine) { m.ExtraMACs = []string{m.MAC} }, "", "extra NIC"},
		{"extra twice", func(m *Machine) { m.ExtraMACs = []string{"52:54:00:00:00:03", "52:54:00:00:00:03"} }, "", "extra NIC"},
		{"extra of another machine", func(*Machine) {}, "52:54:00:00:00:02", "extra NIC"},
		{"extra no MAC", func(m *Machine) { m.ExtraMACs = []string{"nic"} }, "", "extra NIC"},
	} {
		m := ok
		c.change(&m)
		macs := map[string]bool{}
		if c.taken != "" {
			macs[c.taken] = true
		}
		err := m.check(macs)
		if (err == nil) != (c.want == "") || err != nil && !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
		if err == nil && !macs["52:54:00:00:00:02"] {
			t.Errorf("%s: the extra MAC is not counted as taken", c.name)
		}
	}
}

// No password and no session token in any answer or error.
func TestRedfishBMCKeepsSecrets(t *testing.T) {
	m := Machine{Name: "node-0", MAC: "52:54:00:b0:0e:41", BMCUser: "admin", BMCPassword: "secret-pw-41", BMC: BMCRedfish}
	c, _ := testBMC(t, m, &fakeMachine{st: machineState{MACs: []string{m.MAC}}})
	s := c.do(t, "POST", sessionsPath, map[string]string{"UserName": "admin", "Password": m.BMCPassword})
	token := s.header.Get("X-Auth-Token")
	var all strings.Builder
	c.token = token
	for _, p := range []string{redfishRoot, sessionsPath, s.header.Get("Location"), systemPath(m.Name), managerPath, virtualCDPath, "/redfish/v1/SessionService"} {
		a := c.do(t, "GET", p, nil)
		fmt.Fprint(&all, a.body)
	}
	a := c.do(t, "POST", insertMediaPath, map[string]string{"Image": "http://u:" + m.BMCPassword + "@127.0.0.1:1/x.iso?token=" + token})
	fmt.Fprint(&all, a.body)
	if strings.Contains(all.String(), m.BMCPassword) || strings.Contains(all.String(), token) {
		t.Errorf("an answer holds the password or the token:\n%s", all.String())
	}
}

// mediaFailsMachine takes an image into its drive's definition, then
// fails (as when the running machine stops before its own drive changes).
