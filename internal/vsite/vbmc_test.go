package vsite

import (
	"net"
	"net/netip"
	"os"
	"testing"
)

// TestUDPBound reads this process's own sockets as the kernel lists them:
// a BMC is up when its port is bound, on its address or on every address,
// in IPv4 or IPv4-mapped IPv6 form.
func TestUDPBound(t *testing.T) {
	for _, c := range []struct {
		proc string
		want netip.AddrPort
	}{
		{"020017AC:1860", netip.MustParseAddrPort("172.23.0.2:6240")},
		{"0000000000000000FFFF0000020017AC:1860", netip.MustParseAddrPort("[::ffff:172.23.0.2]:6240")},
		{"00000000:0017", netip.MustParseAddrPort("0.0.0.0:23")},
	} {
		got, ok := parseProcAddr(c.proc)
		if !ok || got != c.want {
			t.Errorf("parseProcAddr(%s) = %v %v, want %v", c.proc, got, ok, c.want)
		}
	}
	for _, bad := range []string{"", "020017AC", "02001:1860", "020017AC:GGGG", "020017AC:123456"} {
		if got, ok := parseProcAddr(bad); ok {
			t.Errorf("parseProcAddr(%q) = %v, want refused", bad, got)
		}
	}
	mapped := udpSockets{netip.MustParseAddrPort("[::ffff:172.23.0.2]:6240"), netip.MustParseAddrPort("0.0.0.0:6241")}
	for ap, want := range map[string]bool{"172.23.0.2:6240": true, "172.23.0.3:6240": false, "172.23.0.3:6241": true, "172.23.0.2:6242": false} {
		if got := mapped.listens(netip.MustParseAddrPort(ap)); got != want {
			t.Errorf("listens(%s) = %v, want %v", ap, got, want)
		}
	}

	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	ap := conn.LocalAddr().(*net.UDPAddr).AddrPort()
	bound, err := udpBound(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if !bound.listens(ap) {
		t.Errorf("a socket bound to %s is not among this process's: %v", ap, bound)
	}
	conn.Close()
	if bound, _ := udpBound(os.Getpid()); bound.listens(ap) {
		t.Errorf("a closed socket on %s is still listed", ap)
	}
}
