package dhcphosts

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bootstick/bootstick/internal/dhcpprobe"
)

// runDnsmasq is Ironic's dnsmasq script (the Ironic image's).
const runDnsmasq = "../../images/ironic/usr/local/bin/run-dnsmasq"

// The test network, inside a namespace of the test's own.
const (
	serverIface = "dhcp-srv"
	probeIface  = "dhcp-probe"
	serverIP    = "172.31.250.1"
)

// dnsmasqLog follows a dnsmasq's output line by line.
type dnsmasqLog struct {
	mu    sync.Mutex
	lines []string
	more  chan struct{} // closed and replaced at each new line, and at the end
	ended bool          // dnsmasq closed its output: it exited
}

func followLog(f *os.File) *dnsmasqLog {
	l := &dnsmasqLog{more: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			l.mu.Lock()
			l.lines = append(l.lines, sc.Text())
			close(l.more)
			l.more = make(chan struct{})
			l.mu.Unlock()
		}
		l.mu.Lock()
		l.ended = true
		close(l.more)
		l.mu.Unlock()
	}()
	return l
}

// await returns the first line from line from on that has every one of
// parts, waiting up to a minute for it.
func (l *dnsmasqLog) await(t *testing.T, from int, parts ...string) (string, int) {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		l.mu.Lock()
		for i := from; i < len(l.lines); i++ {
			if hasAll(l.lines[i], parts) {
				line := l.lines[i]
				l.mu.Unlock()
				return line, i + 1
			}
		}
		more, ended := l.more, l.ended
		all := strings.Join(l.lines, "\n")
		l.mu.Unlock()
		if ended {
			t.Fatalf("dnsmasq ended without a line with %q:\n%s", parts, all)
		}
		select {
		case <-more:
		case <-timeout:
			t.Fatalf("dnsmasq logged no line with %q in a minute:\n%s", parts, all)
		}
	}
}

// text is the whole log so far.
func (l *dnsmasqLog) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// len is how many lines there are so far.
func (l *dnsmasqLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.lines)
}

func hasAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// testNet makes a network namespace with a veth pair in it: the server's
// end with serverIP, the probe's end with no address. Both go with the
// namespace at the end of the test.
func testNet(t *testing.T) string {
	t.Helper()
	ns := fmt.Sprintf("bootstick-dhcphosts-%d", os.Getpid())
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	exec.Command("ip", "netns", "del", ns).Run() // an earlier run's
	ip("netns", "add", ns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	ip("-n", ns, "link", "add", serverIface, "type", "veth", "peer", "name", probeIface)
	// No IPv6 link-local address on the probe's end: it says nothing
	// but the probes.
	ip("-n", ns, "link", "set", probeIface, "addrgenmode", "none")
	ip("-n", ns, "addr", "add", serverIP+"/24", "dev", serverIface)
	ip("-n", ns, "link", "set", serverIface, "up")
	ip("-n", ns, "link", "set", probeIface, "up")
	return ns
}

// startDnsmasq runs run-dnsmasq in the namespace ns with the host list
// hosts and DHCP_HOSTS mode, and follows its log; it is ended at the end
// of the test.
func startDnsmasq(t *testing.T, ns, hosts, mode string) *dnsmasqLog {
	t.Helper()
	dir := nobodysTempDir(t) // dnsmasq serves TFTP as nobody
	ipxe := filepath.Join(dir, "ipxe")
	if err := os.MkdirAll(ipxe, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"undionly.kpxe", "snponly.efi", "ipxe.efi"} {
		if err := os.WriteFile(filepath.Join(ipxe, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", ns, "sh", runDnsmasq)
	cmd.Env = append(os.Environ(), "PROVISIONING_INTERFACE="+serverIface, "PROVISIONING_IP="+serverIP,
		"DHCP_RANGE=172.31.250.10,172.31.250.20", "DHCP_HOSTS="+mode, "DHCP_HOSTS_DIR="+hosts,
		"DHCP_LEASE_FILE="+filepath.Join(dir, "leases", "dnsmasq.leases"), "DNSMASQ_RUN_DIR="+filepath.Join(dir, "run"),
		"TFTP_ROOT="+filepath.Join(dir, "tftpboot"), "IPXE_DIR="+ipxe)
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatalf("run-dnsmasq: %v", err)
	}
	w.Close()
	t.Cleanup(func() {
		cmd.Process.Kill() // ip netns exec and sh exec dnsmasq: it is this process
		cmd.Wait()
		r.Close()
	})
	l := followLog(r)
	l.await(t, 0, "dnsmasq-dhcp", "DHCP, IP range")
	return l
}

// nobodysTempDir is a temporary folder that others may enter, as
// dnsmasq does once it has dropped root: the test's own temporary folders
// are root's alone.
func nobodysTempDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// probe asks for an address as the NIC mac, waiting wait for an offer.
func probe(t *testing.T, ns, mac string, wait time.Duration) dhcpprobe.Result {
	t.Helper()
	hw, err := net.ParseMAC(mac)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := dhcpprobe.DiscoverIn(ctx, "/run/netns/"+ns, probeIface, hw, wait)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestDnsmasqFollowsTheList runs Ironic's run-dnsmasq with a real
// dnsmasq in a network namespace of the test's own, and asks it for
// addresses as machines of several MACs (package dhcpprobe). With
// DHCP_HOSTS=site it offers an address to a MAC the host list answers
// and none to an unknown MAC or one it refuses, logging each refusal;
// a host written into the list on day 2 is answered at once, and one
// taken out of it is refused at once, with no restart. With
// DHCP_HOSTS=any, an unknown MAC is answered and a refused one still
// is not.
func TestDnsmasqFollowsTheList(t *testing.T) {
	if testing.Short() {
		t.Skip("runs dnsmasq in a network namespace (root)")
	}
	if os.Getuid() != 0 {
		t.Skip("makes a network namespace: root only")
	}
	if _, err := exec.LookPath("dnsmasq"); err != nil {
		t.Fatal("dnsmasq is not installed (Debian package dnsmasq-base; run bash .ci/install-deps)")
	}
	ns := testNet(t)
	// dnsmasq drops root for nobody, who must reach the host list as in
	// the Ironic Pod.
	hosts := filepath.Join(nobodysTempDir(t), "hosts")
	const (
		known   = "52:54:00:b0:0d:01"
		refused = "52:54:00:b0:0d:0a"
		unknown = "02:00:00:b0:0d:99"
	)
	if _, err := Write(hosts, []Host{{MAC: known, Answer: true}, {MAC: refused}}, false); err != nil {
		t.Fatal(err)
	}
	log := startDnsmasq(t, ns, hosts, "site")

	offered := func(mac string) {
		t.Helper()
		r := probe(t, ns, mac, 10*time.Second)
		if r.Offer == nil || r.Offer.Server.String() != serverIP {
			t.Fatalf("%s: offer %+v, want one from %s; dnsmasq:\n%s", mac, r.Offer, serverIP, log.text())
		}
		t.Logf("%s: offered %s", mac, r.Offer.Address)
	}
	at := 0
	ignored := func(mac string) {
		t.Helper()
		r := probe(t, ns, mac, 2*time.Second)
		if r.Offer != nil {
			t.Fatalf("%s: offered %s, want no offer", mac, r.Offer.Address)
		}
		var line string
		line, at = log.await(t, at, fmt.Sprintf("%d DHCPDISCOVER(%s) %s ignored", r.XID, serverIface, mac))
		t.Logf("%s: no offer; dnsmasq: %s", mac, line)
	}
	offered(known)
	ignored(unknown)
	ignored(refused)

	// Day 2: unknown becomes a host, known goes; no restart.
	from := log.len()
	if _, err := Write(hosts, []Host{{MAC: unknown, Answer: true}, {MAC: refused}}, false); err != nil {
		t.Fatal(err)
	}
	log.await(t, from, "read "+filepath.Join(hosts, "02-00-00-b0-0d-99"))
	log.await(t, from, "read "+filepath.Join(hosts, "52-54-00-b0-0d-01"))
	offered(unknown)
	ignored(known)

	// Any MAC: a new dnsmasq, on the same list.
	log = startDnsmasq(t, ns, hosts, "any")
	at = 0
	offered("02:00:00:b0:0d:77")
	ignored(refused)
	ignored(known) // removed from the site, so its line refuses it: Write(…, false) wrote it
}
