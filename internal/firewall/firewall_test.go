package firewall

import (
	"context"
	"errors"
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

	"github.com/bootstick/bootstick/internal/netns"
)

// TestRenderRefuses: an interface name nft would misread, the same
// interface twice, and a service the site cannot open are refused, naming
// what can be.
func TestRenderRefuses(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Provisioning: `eth0" accept`}, "not an interface name"},
		{Config{Provisioning: ""}, "not an interface name"},
		{Config{Provisioning: "eth0", External: "eth0"}, "other than the provisioning one"},
		{Config{Provisioning: "eth0", Open: []string{"etcd"}}, `"etcd" cannot be opened to the provisioning network (it can open kubernetes-api, ssh)`},
	} {
		if _, err := c.cfg.Render(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
}

// site is three network namespaces shaped like a site around the
// appliance: the appliance (prov0 to the provisioning network, ext0 to
// the external one, pod0 to a pod), a host on the provisioning network,
// a machine on the external network, and a pod.
type site struct {
	names map[string]string // role -> namespace name
	addr  map[string]string // role -> its address
}

func ns(t *testing.T, name string) string {
	t.Helper()
	full := fmt.Sprintf("bootstick-fw%d-%s", os.Getpid(), name)
	run(t, "ip", "netns", "add", full)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", full).Run() })
	run(t, "ip", "-n", full, "link", "set", "lo", "up")
	return full
}

func run(t *testing.T, argv ...string) {
	t.Helper()
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
}

func newSite(t *testing.T) *site {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespaces and nftables need root")
	}
	s := &site{names: map[string]string{}, addr: map[string]string{
		"host": "172.31.0.2", "outside": "172.31.1.2", "pod": "10.244.0.5",
	}}
	for _, role := range []string{"appliance", "host", "outside", "pod"} {
		s.names[role] = ns(t, role)
	}
	a := s.names["appliance"]
	for _, l := range []struct{ iface, peer, ip, peerIP string }{
		{"prov0", "host", "172.31.0.1/24", "172.31.0.2/24"},
		{"ext0", "outside", "172.31.1.1/24", "172.31.1.2/24"},
		{"pod0", "pod", "10.244.0.1/24", "10.244.0.5/24"},
	} {
		peer := s.names[l.peer]
		run(t, "ip", "-n", a, "link", "add", l.iface, "type", "veth", "peer", "name", "eth0", "netns", peer)
		run(t, "ip", "-n", a, "addr", "add", l.ip, "dev", l.iface)
		run(t, "ip", "-n", a, "link", "set", l.iface, "up")
		run(t, "ip", "-n", peer, "addr", "add", l.peerIP, "dev", "eth0")
		run(t, "ip", "-n", peer, "link", "set", "eth0", "up")
		run(t, "ip", "-n", peer, "route", "add", "default", "via", strings.Split(l.ip, "/")[0])
	}
	run(t, "ip", "netns", "exec", a, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
	return s
}

func (s *site) path(role string) string { return filepath.Join("/run/netns", s.names[role]) }

// listen opens a TCP listener on every address of role's namespace that
// accepts and closes each connection, and a UDP one that echoes.
func (s *site) listen(t *testing.T, role string, tcp []int, udp []int) {
	t.Helper()
	err := netns.Do(s.path(role), func() error {
		for _, p := range tcp {
			l, err := net.Listen("tcp4", fmt.Sprintf(":%d", p))
			if err != nil {
				return err
			}
			t.Cleanup(func() { l.Close() })
			go func() {
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					c.Close()
				}
			}()
		}
		for _, p := range udp {
			c, err := net.ListenPacket("udp4", fmt.Sprintf(":%d", p))
			if err != nil {
				return err
			}
			t.Cleanup(func() { c.Close() })
			go func() {
				buf := make([]byte, 64)
				for {
					n, from, err := c.ReadFrom(buf)
					if err != nil {
						return
					}
					c.WriteTo(buf[:n], from)
				}
			}()
		}
		return nil
	})
	if err != nil {
		t.Fatalf("listening in %s: %v", role, err)
	}
}

// dial connects from role's namespace to addr over network ("tcp4", or
// "udp4": one datagram sent and its echo read); nil is a connection.
func (s *site) dial(t *testing.T, role, network, addr string) error {
	t.Helper()
	var derr error
	err := netns.Do(s.path(role), func() error {
		c, err := net.DialTimeout(network, addr, 10*time.Second)
		if err != nil {
			derr = err
			return nil
		}
		defer c.Close()
		if network == "udp4" {
			c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := c.Write([]byte("ping")); err != nil {
				derr = err
				return nil
			}
			_, derr = c.Read(make([]byte, 64))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return derr
}

// refused: the firewall's answer, ICMP administratively prohibited,
// which a client reads as "no route to host".
func refused(err error) bool { return errors.Is(err, syscall.EHOSTUNREACH) }

func (s *site) apply(t *testing.T, c Config) {
	t.Helper()
	nft, err := Find()
	if err != nil {
		t.Fatal(err)
	}
	rules, err := c.Render()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "firewall.nft")
	if err := os.WriteFile(file, rules, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := netns.Do(s.path("appliance"), func() error { return Apply(context.Background(), nft, file) }); err != nil {
		t.Fatalf("%v\n%s", err, rules)
	}
}

// TestFirewall loads the ruleset into a real kernel, in an appliance's
// namespace between a host on the provisioning network, a machine on the
// external network and a pod, and checks what each reaches: the host
// reaches the services it needs and the site's DNS server, and is
// refused (ICMP administratively prohibited) the API server, the kubelet,
// etcd and sshd, and any other network and port; the outside cannot reach the host through the appliance; the
// pod and the appliance itself still reach the host (the BPA's SSH).
// Loading again changes nothing, a site's open list opens sshd, and
// Remove takes the table away.
func TestFirewall(t *testing.T) {
	s := newSite(t)
	need := []int{5000, 6180, 6385}
	closed := []int{22, 2379, 6443, 10250}
	s.listen(t, "appliance", append(need, closed...), []int{123})
	s.listen(t, "host", []int{8022}, nil)
	s.listen(t, "outside", []int{8080}, []int{53})

	app, host, outside := "172.31.0.1", s.addr["host"], s.addr["outside"]
	// Before the firewall, everything answers: the refusals below are
	// the firewall's.
	for _, p := range closed {
		if err := s.dial(t, "host", "tcp4", fmt.Sprintf("%s:%d", app, p)); err != nil {
			t.Fatalf("without the firewall, the host to the appliance's port %d: %v", p, err)
		}
	}
	if err := s.dial(t, "host", "tcp4", outside+":8080"); err != nil {
		t.Fatalf("without the firewall, the host to the external network: %v", err)
	}

	cfg := Config{Provisioning: "prov0", External: "ext0", DNS: []netip.Addr{netip.MustParseAddr(outside)}}
	s.apply(t, cfg)
	s.apply(t, cfg) // again: the table is replaced, not doubled
	check := func(what, role, network, addr string, wantOpen bool) {
		t.Helper()
		err := s.dial(t, role, network, addr)
		switch {
		case wantOpen && err != nil:
			t.Errorf("%s (%s %s from the %s): %v, want a connection", what, network, addr, role, err)
		case !wantOpen && !refused(err):
			t.Errorf("%s (%s %s from the %s): %v, want refused by the firewall (no route to host)", what, network, addr, role, err)
		default:
			t.Logf("%-44s %s %-18s from the %-9s: %s", what, network, addr, role, map[bool]string{true: "open", false: "refused: " + fmt.Sprint(err)}[wantOpen])
		}
	}
	for _, p := range need {
		check("a service the hosts need", "host", "tcp4", fmt.Sprintf("%s:%d", app, p), true)
	}
	check("the site's clock", "host", "udp4", app+":123", true)
	for _, p := range closed {
		check("the control plane or sshd", "host", "tcp4", fmt.Sprintf("%s:%d", app, p), false)
	}
	check("the external network through the appliance", "host", "tcp4", outside+":8080", false)
	check("the site's DNS server through the appliance", "host", "udp4", outside+":53", true)
	check("the host through the appliance", "outside", "tcp4", host+":8022", false)
	check("the host, from a pod (the BPA's SSH)", "pod", "tcp4", host+":8022", true)
	check("the host, from the appliance", "appliance", "tcp4", host+":8022", true)
	check("the appliance's API server from outside", "outside", "tcp4", "172.31.1.1:6443", true)

	s.apply(t, Config{Provisioning: "prov0", External: "ext0", Open: []string{"ssh"}})
	check("sshd, opened by the site", "host", "tcp4", app+":22", true)
	check("the API server, not opened", "host", "tcp4", app+":6443", false)

	nft, _ := Find()
	var loaded bool
	if err := netns.Do(s.path("appliance"), func() error {
		if err := Remove(context.Background(), nft); err != nil {
			return err
		}
		loaded = Loaded(context.Background(), nft)
		return Remove(context.Background(), nft) // no table: no error
	}); err != nil {
		t.Fatal(err)
	}
	if loaded {
		t.Error("the table is still loaded after Remove")
	}
	check("the API server, the firewall removed", "host", "tcp4", app+":6443", true)
}
