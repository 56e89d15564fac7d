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
	pods := netip.MustParsePrefix("10.244.0.0/16")
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Provisioning: `eth0" accept`, PodCIDR: pods}, "not an interface name"},
		{Config{Provisioning: "", PodCIDR: pods}, "not an interface name"},
		{Config{Provisioning: "eth0"}, "no pod range"},
		{Config{Provisioning: "eth0", PodCIDR: pods, Open: []string{"etcd"}}, `"etcd" cannot be opened to the provisioning network (it can open kubernetes-api, ssh)`},
	} {
		if _, err := c.cfg.Render(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
}

// site is network namespaces shaped like a site around the appliance:
// the appliance, whose provisioning network is a bridge (prov0) with two
// hosts on it (host, on DHCP alone with the appliance as its router, and
// host2 with a second leg, its cluster address, which the appliance also
// has on prov0, as in the README's example site), ext0 to the external
// network (outside: a machine at .2 and a site host's cluster address at
// .3), and pod0 to a pod.
type site struct {
	names map[string]string // role -> namespace name
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
	s := &site{names: map[string]string{}}
	for _, role := range []string{"appliance", "host", "host2", "outside", "pod"} {
		s.names[role] = ns(t, role)
	}
	a := s.names["appliance"]
	run(t, "ip", "-n", a, "link", "add", "prov0", "type", "bridge")
	for _, l := range []struct {
		iface, peer string
		ips         []string
		peerIPs     []string
		via         string
	}{
		{"prov0p1", "host", nil, []string{"172.31.0.2/24"}, "172.31.0.1"},
		{"prov0p2", "host2", nil, []string{"172.31.0.3/24", "10.20.0.11/24"}, "10.20.0.1"},
		{"ext0", "outside", []string{"172.31.1.1/24"}, []string{"172.31.1.2/24", "172.31.1.3/24"}, "172.31.1.1"},
		{"pod0", "pod", []string{"10.244.0.1/24"}, []string{"10.244.0.5/24"}, "10.244.0.1"},
	} {
		peer := s.names[l.peer]
		run(t, "ip", "-n", a, "link", "add", l.iface, "type", "veth", "peer", "name", "eth0", "netns", peer)
		if strings.HasPrefix(l.iface, "prov0") {
			run(t, "ip", "-n", a, "link", "set", l.iface, "master", "prov0")
		}
		for _, ip := range l.ips {
			run(t, "ip", "-n", a, "addr", "add", ip, "dev", l.iface)
		}
		run(t, "ip", "-n", a, "link", "set", l.iface, "up")
		for _, ip := range l.peerIPs {
			run(t, "ip", "-n", peer, "addr", "add", ip, "dev", "eth0")
		}
		run(t, "ip", "-n", peer, "link", "set", "eth0", "up")
		run(t, "ip", "-n", peer, "route", "add", "default", "via", l.via)
	}
	for _, ip := range []string{"172.31.0.1/24", "10.20.0.1/24"} {
		run(t, "ip", "-n", a, "addr", "add", ip, "dev", "prov0")
	}
	run(t, "ip", "-n", a, "link", "set", "prov0", "up")
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

// dial connects from role's namespace (FROM@ROLE: from its address FROM)
// to addr over network ("tcp4", or "udp4": one datagram sent and its echo
// read); nil is a connection.
func (s *site) dial(t *testing.T, role, network, addr string) error {
	t.Helper()
	from, role, _ := strings.Cut(role, "@")
	if role == "" {
		from, role = "", from
	}
	var derr error
	err := netns.Do(s.path(role), func() error {
		d := net.Dialer{Timeout: 10 * time.Second}
		if from != "" {
			d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
		}
		c, err := d.Dial(network, addr)
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

func (s *site) apply(t *testing.T, c Config) []byte {
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
	return rules
}

// TestFirewall loads the ruleset into a real kernel, in an appliance's
// namespace among hosts on the provisioning network, machines on the
// external network and a pod, and checks what each reaches: a host
// reaches the services it needs and the site's DNS server, and is refused
// (ICMP administratively prohibited) the API server, the kubelet, etcd
// and sshd, and any other network, but for the site's hosts' cluster
// addresses, on the provisioning network (the README's example site) and
// beyond; an outside machine cannot reach the hosts through the
// appliance, a site host there can; the pod and the appliance itself
// reach the hosts (the BPA's SSH). Loading again replaces the table, a
// site's open list opens sshd, and Remove takes the table away.
func TestFirewall(t *testing.T) {
	s := newSite(t)
	need := []int{5000, 6180, 6385}
	closed := []int{22, 2379, 6443, 10250}
	s.listen(t, "appliance", append(need, closed...), []int{123})
	s.listen(t, "host", []int{8022}, nil)
	s.listen(t, "host2", []int{8022}, nil)
	s.listen(t, "outside", []int{8080}, []int{53})

	app, host := "172.31.0.1", "172.31.0.2"
	// Before the firewall, everything answers: the refusals below are
	// the firewall's.
	for _, p := range closed {
		if err := s.dial(t, "host", "tcp4", fmt.Sprintf("%s:%d", app, p)); err != nil {
			t.Fatalf("without the firewall, the host to the appliance's port %d: %v", p, err)
		}
	}
	if err := s.dial(t, "host", "tcp4", "172.31.1.2:8080"); err != nil {
		t.Fatalf("without the firewall, the host to the external network: %v", err)
	}

	cfg := Config{Provisioning: "prov0", PodCIDR: netip.MustParsePrefix("10.244.0.0/16"),
		Hosts: []netip.Addr{netip.MustParseAddr("10.20.0.11"), netip.MustParseAddr("172.31.1.3")},
		DNS:   []netip.Addr{netip.MustParseAddr("172.31.1.2")}}
	rules := s.apply(t, cfg)
	s.apply(t, cfg) // again: the table is replaced, not doubled
	if got, want := s.ruleCount(t), countRules(string(rules)); want == 0 || got != want {
		t.Errorf("the table holds %d rules after loading twice, the ruleset %d", got, want)
	}
	check := func(what, role, network, addr string, wantOpen bool) {
		t.Helper()
		err := s.dial(t, role, network, addr)
		switch {
		case wantOpen && err != nil:
			t.Errorf("%s (%s %s from the %s): %v, want a connection", what, network, addr, role, err)
		case !wantOpen && !refused(err):
			t.Errorf("%s (%s %s from the %s): %v, want refused by the firewall (no route to host)", what, network, addr, role, err)
		default:
			t.Logf("%-46s %s %-18s from %-20s: %s", what, network, addr, role, map[bool]string{true: "open", false: "refused: " + fmt.Sprint(err)}[wantOpen])
		}
	}
	for _, p := range need {
		check("a service the hosts need", "host", "tcp4", fmt.Sprintf("%s:%d", app, p), true)
	}
	check("the site's clock", "host", "udp4", app+":123", true)
	for _, p := range closed {
		check("the control plane or sshd", "host", "tcp4", fmt.Sprintf("%s:%d", app, p), false)
	}
	check("another host's cluster address, same network", "host", "tcp4", "10.20.0.11:8022", true)
	check("a site host's cluster address beyond", "host", "tcp4", "172.31.1.3:8080", true)
	check("the external network through the appliance", "host", "tcp4", "172.31.1.2:8080", false)
	check("the site's DNS server through the appliance", "host", "udp4", "172.31.1.2:53", true)
	check("the host through the appliance", "172.31.1.2@outside", "tcp4", host+":8022", false)
	check("the host, from a site host beyond", "172.31.1.3@outside", "tcp4", host+":8022", true)
	check("the host, from a pod (the BPA's SSH)", "pod", "tcp4", host+":8022", true)
	check("the host, from the appliance", "appliance", "tcp4", host+":8022", true)
	check("the appliance's API server from outside", "outside", "tcp4", "172.31.1.1:6443", true)

	cfg.Open = []string{"ssh"}
	s.apply(t, cfg)
	check("sshd, opened by the site", "host", "tcp4", app+":22", true)
	check("the API server, not opened", "host", "tcp4", app+":6443", false)

	nft, _ := Find()
	var loaded bool
	if err := netns.Do(s.path("appliance"), func() error {
		if err := Remove(context.Background(), nft); err != nil {
			return err
		}
		var err error
		if loaded, err = Loaded(context.Background(), nft); err != nil {
			return err
		}
		return Remove(context.Background(), nft) // no table: no error
	}); err != nil {
		t.Fatal(err)
	}
	if loaded {
		t.Error("the table is still loaded after Remove")
	}
	check("the API server, the firewall removed", "host", "tcp4", app+":6443", true)
}

// countRules counts a ruleset's rules: its lines that accept or reject.
func countRules(text string) int {
	n := 0
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, "#") && !strings.HasPrefix(l, "type ") && (strings.Contains(l, " accept") || strings.Contains(l, " reject") || strings.Contains(l, " drop") || strings.Contains(l, " jump ")) {
			n++
		}
	}
	return n
}

// ruleCount is countRules of the table as the appliance's kernel has it.
func (s *site) ruleCount(t *testing.T) int {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", s.names["appliance"], "nft", "list", "table", "inet", Table).CombinedOutput()
	if err != nil {
		t.Fatalf("nft list table: %v\n%s", err, out)
	}
	return countRules(string(out))
}
