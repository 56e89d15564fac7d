package qemutest

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/bootstick/bootstick/internal/qemu"
	"github.com/bootstick/bootstick/internal/site"
	"github.com/bootstick/bootstick/internal/status"
)

// The test site must load, carry the harness's key, point the bootstrap
// machine at the QEMU NIC, and render the objects scenario 1 looks for.
func TestSiteYAML(t *testing.T) {
	_, _, line, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "site.yaml")
	if err := os.WriteFile(path, []byte(SiteYAML(line)), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := site.Load(path, site.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(s.SSHAuthorizedKeys, line) {
		t.Errorf("sshAuthorizedKeys %v lack the harness key", s.SSHAuthorizedKeys)
	}
	if ext := s.Bootstrap.External; ext == nil || ext.Interface != qemu.NICName || !strings.HasPrefix(ext.Address, qemu.GuestAddress+"/") || ext.Gateway != "" {
		t.Errorf("external %+v is not the QEMU user network's NIC %s at %s with no gateway", ext, qemu.NICName, qemu.GuestAddress)
	}
	if s.Bootstrap.Provisioning.Interface != qemu.ProvisioningNICName {
		t.Errorf("provisioning %+v is not on the second NIC %s", s.Bootstrap.Provisioning, qemu.ProvisioningNICName)
	}
	keys, resources, err := SiteObjects(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"BareMetalHost/metal3/master-0", "BareMetalHost/metal3/worker-0",
		"Secret/metal3/master-0-bmc-secret", "Secret/metal3/worker-0-bmc-secret",
		"Secret/metal3/master-0-user-data",
	} {
		if !slices.Contains(keys, want) {
			t.Errorf("rendered objects %v lack %s", keys, want)
		}
	}
	if !slices.ContainsFunc(keys, func(k string) bool { return strings.HasPrefix(k, "Provisioning/") }) {
		t.Errorf("rendered objects %v lack the Provisioning", keys)
	}
	for _, want := range []string{"secret", "baremetalhost.metal3.io"} {
		if !slices.Contains(resources, want) {
			t.Errorf("resources %v lack %s", resources, want)
		}
	}
}

func TestConsole(t *testing.T) {
	c := &Console{changed: make(chan struct{})}
	c.feed([]byte("\x1b[2J\x1b[1;1HSeaBIOS (version 1.16)\r\nBooting from DVD/CD...\npartial"), 2*time.Second)
	c.feed([]byte(" line\n\n[   3.1] Linux version 6.1.0\n"), 5*time.Second)
	got := c.Lines()
	want := []Line{
		{2 * time.Second, "SeaBIOS (version 1.16)"},
		{2 * time.Second, "Booting from DVD/CD..."},
		{5 * time.Second, "partial line"},
		{5 * time.Second, "[   3.1] Linux version 6.1.0"},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("lines:\n%q\nwant\n%q", got, want)
	}
	if !strings.Contains(c.Tail(1), "5.0s | [   3.1] Linux version") || strings.Contains(c.Tail(1), "SeaBIOS") {
		t.Errorf("Tail(1) = %q", c.Tail(1))
	}

	// Wait sees a line fed after from, whether it comes before or after
	// the wait begins, and honours from.
	re := regexp.MustCompile(`firstboot: done in`)
	res := make(chan Line, 1)
	from := c.Len()
	go func() {
		l, err := c.Wait(context.Background(), re, from, nil)
		if err != nil {
			t.Error(err)
		}
		res <- l
	}()
	c.feed([]byte("firstboot[1]: firstboot: done in 5m\n"), 9*time.Second)
	select {
	case l := <-res:
		if l.At != 9*time.Second {
			t.Errorf("Wait returned %+v", l)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wait did not see the new line")
	}
	if _, err := c.Wait(context.Background(), re, c.Len(), closed()); err == nil {
		t.Error("Wait after the last line on a stopped machine succeeded")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.Wait(ctx, regexp.MustCompile("never"), 0, nil); err == nil {
		t.Error("Wait for a missing line succeeded")
	}
}

func closed() chan struct{} { c := make(chan struct{}); close(c); return c }

// FollowConsole reads a file that grows.
func TestFollowConsole(t *testing.T) {
	path := filepath.Join(t.TempDir(), "serial.log")
	c := FollowConsole(path, time.Now())
	defer c.Close()
	if err := os.WriteFile(path, []byte("one\ntwo"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The follower has read the file once, "two" with no end of line yet.
	first, cancelFirst := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelFirst()
	if _, err := c.Wait(first, regexp.MustCompile(`^one$`), 0, nil); err != nil {
		t.Fatal(err)
	}
	f.WriteString(" three\n")
	f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l, err := c.Wait(ctx, regexp.MustCompile(`^two three$`), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if l.At <= 0 {
		t.Errorf("line stamped %s", l.At)
	}
}

func TestPulledRefs(t *testing.T) {
	tests := []struct {
		name, log string
		want      []string
		wantErr   bool
	}{
		{"empty", "", []string{}, false},
		{"served manifests count by tag and digest, failures and blobs do not", `{"method":"GET","ns":"registry.k8s.io","repo":"pause","kind":"manifest","reference":"3.10","digest":"sha256:0a","status":200}
{"method":"HEAD","ns":"registry.k8s.io","repo":"etcd","kind":"manifest","reference":"3.6.5-0","digest":"sha256:0b","status":200}
{"method":"GET","ns":"registry.bootstick.dev","repo":"bpa-operator","kind":"manifest","digest":"sha256:0c","status":200}
{"method":"GET","ns":"registry.k8s.io","repo":"coredns/coredns","kind":"manifest","reference":"v1.12.1","digest":"sha256:0d","status":404}
{"method":"GET","ns":"registry.k8s.io","repo":"pause","kind":"blob","digest":"sha256:aa","status":200}
`, []string{"registry.k8s.io/etcd:3.6.5-0", "registry.k8s.io/pause:3.10", "sha256:0a", "sha256:0b", "sha256:0c"}, false},
		{"garbage", "not json\n", []string{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := PulledRefs(tc.log)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if keys := sortedKeys(got); !slices.Equal(keys, tc.want) {
				t.Errorf("got %v, want %v", keys, tc.want)
			}
		})
	}
}

func TestBuildTimeline(t *testing.T) {
	on := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	ahead := 3 * time.Second // the guest's clock runs 3 s ahead
	lines := []Line{
		{1 * time.Second, "Loading /live/vmlinuz... ok"},
		{9 * time.Second, "[    0.000000] Linux version 6.1.0-41-amd64"},
		{80 * time.Second, "[   68.3] systemd[1]: systemd 252.39-1~deb12u2 running in system mode (+PAM)"},
		{95 * time.Second, "[   89.1] echo[372]: bootstick: firstboot.service starting"},
	}
	rep := &status.Report{Steps: []status.StepReport{
		{Name: "preflight", State: "done", Started: on.Add(100*time.Second + ahead), DurationSeconds: 1.5, Attempts: 1},
		{Name: "kubeadm-init", State: "done", Started: on.Add(-time.Hour), DurationSeconds: 300, Attempts: 2},
		{Name: "site", State: "pending"},
	}}
	tl := BuildTimeline("test", lines, rep, ahead, on)
	byName := map[string]Row{}
	for _, r := range tl.Rows {
		byName[r.Name] = r
	}
	if r := byName["systemd"]; r.Start != 80*time.Second || r.Source != "console" {
		t.Errorf("systemd row %+v", r)
	}
	if _, ok := byName["firstboot done"]; ok {
		t.Error("a milestone the console never showed is in the table")
	}
	if r := byName["step preflight"]; r.Start != 100*time.Second || r.Duration != 1500*time.Millisecond || r.Earlier {
		t.Errorf("preflight row %+v", r)
	}
	if r := byName["step kubeadm-init"]; !r.Earlier {
		t.Errorf("a step from an earlier boot is not marked: %+v", r)
	}
	out := tl.String()
	for _, want := range []string{"kernel", "   9.0s", "step preflight", "101.5s", "in an earlier boot", "step site"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestCompareSnapshots(t *testing.T) {
	before := Snapshot{"Node//n": "1", "Secret/metal3/a": "2", "BareMetalHost/metal3/h": "3"}
	after := Snapshot{"Node//n": "1", "Secret/metal3/a": "9"}
	errs := CompareSnapshots(before, after)
	if len(errs) != 2 || !strings.Contains(errs[0].Error(), "BareMetalHost/metal3/h is gone") || !strings.Contains(errs[1].Error(), "recreated") {
		t.Errorf("errors %v", errs)
	}
	if errs := CompareSnapshots(before, before); len(errs) != 0 {
		t.Errorf("same snapshot: %v", errs)
	}
}

func TestHostKeysPin(t *testing.T) {
	key := func() ssh.PublicKey {
		pub, _, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		k, err := ssh.NewPublicKey(pub)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	a, b := key(), key()
	var h HostKeys
	if err := h.check("", nil, a); err != nil {
		t.Fatal(err)
	}
	if err := h.check("", nil, a); err != nil {
		t.Errorf("the same key again: %v", err)
	}
	if err := h.check("", nil, b); err == nil {
		t.Error("a changed host key was accepted")
	}
}

// A given ISO needs its key.
func TestGivenStick(t *testing.T) {
	dir := t.TempDir()
	iso := filepath.Join(dir, "x.iso")
	os.WriteFile(iso, []byte("x"), 0o644)
	_, priv, _, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "key")
	os.WriteFile(keyFile, priv, 0o600)
	tests := []struct {
		name, key, want string
	}{
		{"no key", "", "needs " + EnvSSHKey},
		{"missing key", filepath.Join(dir, "nope"), "nope"},
		{"not a key", iso, "not an unencrypted OpenSSH private key"},
		{"good", keyFile, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(EnvSSHKey, tc.key)
			s, err := givenStick(iso)
			if tc.want == "" {
				if err != nil || s.Signer == nil || s.ISO != iso {
					t.Fatalf("givenStick: %+v, %v", s, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
}

// lastWords gives the kernel's trouble lines when there are any, else
// the console's last lines: what a stopped machine's failure says.
func TestLastWords(t *testing.T) {
	at := func(s int, text string) Line { return Line{At: time.Duration(s) * time.Second, Text: text} }
	quiet := []Line{at(1, "a"), at(2, "b"), at(3, "c"), at(4, "d"), at(5, "e"), at(6, "f")}
	if got, want := lastWords(quiet), "its last console lines: 2.0s b | 3.0s c | 4.0s d | 5.0s e | 6.0s f"; got != want {
		t.Errorf("lastWords(quiet) = %q, want %q", got, want)
	}
	panicked := append(quiet, at(170, "[  160.1] BUG: kernel NULL pointer dereference, address: 0000000000000008"),
		at(171, "[  160.2] RIP: 0010:do_something+0x1/0x2"), at(172, "[  160.3] Kernel panic - not syncing: Fatal exception"),
		at(173, "[  160.4] Rebooting in 10 seconds.."), at(174, "g"))
	got := lastWords(panicked)
	for _, want := range []string{"the kernel said: ", "170.0s [  160.1] BUG: kernel NULL pointer", "Kernel panic - not syncing", "Rebooting in 10 seconds"} {
		if !strings.Contains(got, want) {
			t.Errorf("lastWords(panicked) = %q, want it to hold %q", got, want)
		}
	}
	if strings.Contains(got, "6.0s f") {
		t.Errorf("lastWords(panicked) = %q: it gives the last lines though the kernel said why", got)
	}
	if got := lastWords(nil); got != "the console stayed silent" {
		t.Errorf("lastWords(nil) = %q", got)
	}
}

// findPanics tells TCG's race on the kernel's patching of its own code
// (an int3 oops where the int3 is already gone: the console of a cold
// boot under TCG, 2026-11-28) from any other panic.
func TestFindPanics(t *testing.T) {
	at := func(s int, text string) Line { return Line{At: time.Duration(s) * time.Second, Text: text} }
	race := []Line{
		at(50, "[   49.983944] Oops: int3: 0000 [#1] PREEMPT SMP NOPTI"),
		at(50, "[   49.984555] RIP: 0010:kmem_cache_free+0x103/0x440"),
		at(50, "[   49.984661] Code: 3b ac 22 01 49 8b 44 24 08 4d 89 e5 a8 01 0f 85 bc 02 00 00 0f 1f 44 00 00 31 c0 41 80 7d 33 f5 48 89 5c 24 10 4c 0f 45 e8 66 <90> 4d 8b 45 38 49 83 f8 07"),
		at(50, "[   49.986508] Code: f0 ff ff 73 01 c3 48 8b 0d 96 6e 0d 00 f7 d8 64 89 01 48 83 c8 ff c3 66 2e 0f 1f 84 00 00 00 00 00 66 90 b8 c5 00 00 00 0f 05 <48> 3d 01 f0"),
		at(50, "[   49.987791] Kernel panic - not syncing: Fatal exception in interrupt"),
	}
	stillThere := []Line{
		at(80, "[   79.1] Oops: int3: 0000 [#1] PREEMPT SMP NOPTI"),
		at(80, "[   79.2] Code: 4c 0f 45 e8 cc <90> 4d 8b 45 38"),
		at(80, "[   79.3] Kernel panic - not syncing: Fatal exception"),
	}
	null := []Line{
		at(170, "[  160.1] BUG: kernel NULL pointer dereference, address: 0000000000000008"),
		at(170, "[  160.1] Oops: 0000 [#1] PREEMPT SMP NOPTI"),
		at(170, "[  160.2] Code: 48 8b 47 08 <48> 8b 00"),
		at(172, "[  160.3] Kernel panic - not syncing: Fatal exception"),
	}
	var lines []Line
	lines = append(lines, at(1, "[    1.0] Linux version 6.12"))
	lines = append(lines, race...)
	lines = append(lines, at(60, "[    0.000000] Linux version 6.12 (reboot)"))
	lines = append(lines, stillThere...)
	lines = append(lines, null...)
	got := findPanics(lines)
	if len(got) != 3 {
		t.Fatalf("findPanics found %d panics, want 3: %v", len(got), got)
	}
	for i, want := range []struct {
		oops string
		race bool
	}{{"Oops: int3: 0000 [#1] PREEMPT SMP NOPTI", true}, {"Oops: int3: 0000 [#1] PREEMPT SMP NOPTI", false}, {"Oops: 0000 [#1] PREEMPT SMP NOPTI", false}} {
		if got[i].Oops != want.oops || got[i].TCGRace != want.race {
			t.Errorf("panic %d: oops %q, TCG race %v; want %q, %v", i, got[i].Oops, got[i].TCGRace, want.oops, want.race)
		}
	}
	if findPanics(race[:3]) != nil {
		t.Errorf("an oops with no panic after it counted as a panic")
	}
}
