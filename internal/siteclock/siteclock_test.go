package siteclock

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestRender(t *testing.T) {
	base := Config{Listen: netip.MustParseAddr("172.22.0.1"), Allow: netip.MustParsePrefix("172.22.0.1/24"), PIDFile: "/run/bootstick/chronyd.pid"}
	for _, c := range []struct {
		name       string
		change     func(*Config)
		want, deny []string
	}{
		{"appliance, the site's servers", func(c *Config) { c.Servers, c.SetClock = []string{"10.0.0.1", "ntp.example.org"}, true },
			[]string{"server 10.0.0.1 iburst\n", "server ntp.example.org iburst\n", "makestep 1 3\n", "rtcsync\n", "local stratum 10\n",
				"bindaddress 172.22.0.1\n", "allow 172.22.0.0/24\n", "cmdport 0\n", "bindcmdaddress /\n", "pidfile /run/bootstick/chronyd.pid\n"},
			[]string{"pool", "driftfile"}},
		{"appliance, no servers: its own clock", func(c *Config) { c.SetClock = true },
			[]string{"makestep 1 3\n", "local stratum 10\n", "allow 172.22.0.0/24\n"}, []string{"\nserver "}},
		{"developer mode: serves only", func(c *Config) { c.Servers = []string{"10.0.0.1"} },
			[]string{"server 10.0.0.1 iburst\n", "local stratum 10\n"}, []string{"makestep", "rtcsync"}},
	} {
		cfg := base
		c.change(&cfg)
		out, err := cfg.Render()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		for _, w := range c.want {
			if !strings.Contains(string(out), w) {
				t.Errorf("%s: no %q in\n%s", c.name, w, out)
			}
		}
		for _, d := range c.deny {
			if strings.Contains(string(out), d) {
				t.Errorf("%s: %q in\n%s", c.name, d, out)
			}
		}
	}
}

func TestRenderRefuses(t *testing.T) {
	ok := Config{Listen: netip.MustParseAddr("172.22.0.1"), Allow: netip.MustParsePrefix("172.22.0.0/24"), PIDFile: "/run/x.pid"}
	for _, c := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"address outside the network", func(c *Config) { c.Listen = netip.MustParseAddr("10.0.0.1") }, "not in the network"},
		{"no address", func(c *Config) { c.Listen = netip.Addr{} }, "not in the network"},
		{"a server with a space", func(c *Config) { c.Servers = []string{"10.0.0.1 minpoll 1"} }, `NTP server "10.0.0.1 minpoll 1"`},
		{"a server with a newline", func(c *Config) { c.Servers = []string{"10.0.0.1\nallow all"} }, "is not a name or an address"},
		{"no pid file", func(c *Config) { c.PIDFile = "" }, "pid file"},
	} {
		cfg := ok
		c.change(&cfg)
		if _, err := cfg.Render(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

// answer is a server's reply to req: stratum, leap, reference ID, and
// the server's clock at receive and transmit.
func answer(req []byte, leap, stratum byte, ref [4]byte, recv, xmit time.Time) []byte {
	b := make([]byte, 48)
	b[0] = leap<<6 | 4<<3 | 4
	b[1] = stratum
	copy(b[12:16], ref[:])
	copy(b[24:32], req[40:48])
	putNTPTime(b[32:], recv)
	putNTPTime(b[40:], xmit)
	return b
}

func TestParse(t *testing.T) {
	t1 := time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC)
	t4 := t1.Add(20 * time.Millisecond)
	req := make([]byte, 48)
	putNTPTime(req[40:], t1)
	// A server three hours ahead, 10 ms each way.
	ahead := 3 * time.Hour
	b := answer(req, 0, 3, [4]byte{10, 0, 0, 1}, t1.Add(ahead+10*time.Millisecond), t1.Add(ahead+10*time.Millisecond))
	a, err := parse(b, req[40:48], t1, t4)
	if err != nil {
		t.Fatal(err)
	}
	if a.Stratum != 3 || !a.Synchronized || a.RefID != "10.0.0.1" {
		t.Errorf("answer %+v", a)
	}
	if d := a.Offset - ahead; d < -time.Millisecond || d > time.Millisecond {
		t.Errorf("offset %v, want %v", a.Offset, ahead)
	}
	if a, err := parse(answer(req, 3, 10, [4]byte{127, 127, 1, 1}, t1, t1), req[40:48], t1, t4); err != nil || a.Synchronized || a.RefID != "127.127.1.1" {
		t.Errorf("an unsynchronized server: %+v %v", a, err)
	}
	if a, err := parse(answer(req, 0, 1, [4]byte{'G', 'P', 'S', 0}, t1, t1), req[40:48], t1, t4); err != nil || a.RefID != "GPS" {
		t.Errorf("a stratum-1 server: %+v %v", a, err)
	}
	for name, c := range map[string]struct {
		b    []byte
		want string
	}{
		"short":         {b[:47], "short of NTP's 48"},
		"client mode":   {append([]byte{0<<6 | 4<<3 | 3}, b[1:]...), "not a server's"},
		"kiss-o'-death": {answer(req, 3, 0, [4]byte{'R', 'A', 'T', 'E'}, t1, t1), `kiss code "RATE"`},
	} {
		if _, err := parse(c.b, req[40:48], t1, t4); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
	other := make([]byte, 8)
	if _, err := parse(b, other, t1, t4); err != errNotOurs {
		t.Errorf("an answer to another question: %v", err)
	}
}

// TestQuery asks a server on loopback that answers late to an earlier
// question first, then to this one.
func TestQuery(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	go func() {
		req := make([]byte, 48)
		_, from, err := pc.ReadFrom(req)
		if err != nil {
			return
		}
		now := time.Now()
		stale := make([]byte, 48)
		putNTPTime(stale[40:], now.Add(-time.Minute))
		pc.WriteTo(answer(stale, 0, 2, [4]byte{10, 0, 0, 9}, now, now), from)
		pc.WriteTo(answer(req, 0, 2, [4]byte{10, 0, 0, 1}, now, now), from)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, err := Query(ctx, netip.MustParseAddrPort(pc.LocalAddr().String()))
	if err != nil {
		t.Fatal(err)
	}
	if a.RefID != "10.0.0.1" || a.Stratum != 2 {
		t.Errorf("answer %+v, want the one to this question", a)
	}
	if a.Offset < -time.Second || a.Offset > time.Second {
		t.Errorf("offset %v from a server on this machine", a.Offset)
	}
}

// startChronyd runs Debian's chronyd in the foreground with conf, never
// setting this machine's clock (-x), until the test ends.
func startChronyd(t *testing.T, ctx context.Context, name string, conf []byte) (exited <-chan error, out *strings.Builder) {
	t.Helper()
	chronyd, err := exec.LookPath("chronyd")
	if err != nil {
		t.Fatalf("chronyd is not installed (Debian package chrony; run bash .ci/install-deps): %v", err)
	}
	path := filepath.Join(t.TempDir(), name+".conf")
	if err := os.WriteFile(path, conf, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, chronyd, "-x", "-d", "-f", path)
	out = &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		<-done
	})
	return done, out
}

// waitAnswer asks addr the time until ok holds for its answer.
func waitAnswer(t *testing.T, ctx context.Context, addr string, exited <-chan error, out *strings.Builder, ok func(Answer) bool) Answer {
	t.Helper()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		qctx, qcancel := context.WithTimeout(ctx, time.Second)
		a, err := Query(qctx, netip.MustParseAddrPort(addr))
		qcancel()
		if err == nil && ok(a) {
			return a
		}
		select {
		case err := <-exited:
			t.Fatalf("chronyd exited: %v\n%s", err, out.String())
		case <-ctx.Done():
			t.Fatalf("chronyd at %s never gave the answer wanted (last: %+v, %v)\n%s", addr, a, err, out.String())
		case <-tick.C:
		}
	}
}

// TestChronydServes runs Debian's chronyd with the configuration Render
// writes, on loopback, and asks it the time as a host does. With no server
// it stands as the site's clock (stratum 10), its time this machine's.
// Named a server (another chronyd, on 127.0.0.2, standing at stratum 3),
// it follows it: stratum 4, the server's address as its reference.
func TestChronydServes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	cfg := Config{Listen: netip.MustParseAddr("127.0.0.1"), Allow: netip.MustParsePrefix("127.0.0.0/8"), PIDFile: filepath.Join(dir, "site.pid")}
	conf, err := cfg.Render()
	if err != nil {
		t.Fatal(err)
	}
	exited, out := startChronyd(t, ctx, "site", conf)
	a := waitAnswer(t, ctx, "127.0.0.1:123", exited, out, func(a Answer) bool { return a.Synchronized })
	if a.Stratum != 10 || a.RefID != "127.127.1.1" {
		t.Errorf("chronyd with no server answers %+v, want stratum 10 from its own clock", a)
	}
	if a.Offset < -time.Second || a.Offset > time.Second {
		t.Errorf("chronyd serves a time %v off this machine's", a.Offset)
	}
	t.Logf("with no server: %+v", a)

	// The site's NTP server.
	upstream := fmt.Sprintf("local stratum 3\nbindaddress 127.0.0.2\nallow 127.0.0.0/8\ncmdport 0\nbindcmdaddress /\npidfile %s\n", filepath.Join(dir, "upstream.pid"))
	uexited, uout := startChronyd(t, ctx, "upstream", []byte(upstream))
	waitAnswer(t, ctx, "127.0.0.2:123", uexited, uout, func(a Answer) bool { return a.Synchronized && a.Stratum == 3 })
	cfg.Servers, cfg.Listen, cfg.PIDFile = []string{"127.0.0.2"}, netip.MustParseAddr("127.0.0.3"), filepath.Join(dir, "follower.pid")
	conf, err = cfg.Render()
	if err != nil {
		t.Fatal(err)
	}
	fexited, fout := startChronyd(t, ctx, "follower", conf)
	a = waitAnswer(t, ctx, "127.0.0.3:123", fexited, fout, func(a Answer) bool { return a.Synchronized && a.Stratum < 10 })
	if a.Stratum != 4 || a.RefID != "127.0.0.2" {
		t.Errorf("chronyd following the site's server answers %+v, want stratum 4 with reference 127.0.0.2", a)
	}
	t.Logf("following the site's server: %+v", a)
}
