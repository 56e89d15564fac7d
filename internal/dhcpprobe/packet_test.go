package dhcpprobe

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
)

var testMAC = net.HardwareAddr{0x02, 0x00, 0x00, 0xb0, 0x07, 0x99}

// TestDiscovery: the DISCOVER is what a DHCP server expects of a machine
// with no address: BOOTP's size, a request from the NIC's MAC with the
// broadcast flag, message type DISCOVER and the MAC as client id.
func TestDiscovery(t *testing.T) {
	b := Discovery(0xdeadbeef, testMAC)
	if len(b) < minLen {
		t.Errorf("%d bytes, want at least %d", len(b), minLen)
	}
	if b[0] != opRequest || b[1] != htypeEther || b[2] != 6 {
		t.Errorf("op, htype, hlen = %d, %d, %d; want a request from an Ethernet NIC", b[0], b[1], b[2])
	}
	if got := binary.BigEndian.Uint32(b[offXID:]); got != 0xdeadbeef {
		t.Errorf("xid %#x", got)
	}
	if got := binary.BigEndian.Uint16(b[offFlags:]); got != flagBcast {
		t.Errorf("flags %#x, want the broadcast flag", got)
	}
	if !bytes.Equal(b[offCHAddr:offCHAddr+6], testMAC) {
		t.Errorf("chaddr %x, want %s", b[offCHAddr:offCHAddr+6], testMAC)
	}
	if !bytes.Equal(b[fixedLen:fixedLen+4], magic) {
		t.Fatalf("no DHCP magic cookie")
	}
	opts := options(b[fixedLen+4:])
	if t0 := opts[optMsgType]; len(t0) != 1 || t0[0] != msgDiscover {
		t.Errorf("message type %v, want DISCOVER", t0)
	}
	if id := opts[optClientID]; !bytes.Equal(id, append([]byte{htypeEther}, testMAC...)) {
		t.Errorf("client id %x, want 01 and the MAC", id)
	}
}

// offerTo is the server's answer to the DISCOVER disc: msgType, the
// address offered and the server's identifier.
func offerTo(disc []byte, msgType byte, yiaddr, server netip.Addr) []byte {
	b := append([]byte(nil), disc[:fixedLen+4]...)
	b[0] = opReply
	copy(b[offYIAddr:], yiaddr.AsSlice())
	b = append(b, optPad, optMsgType, 1, msgType)
	b = append(b, optServerID, 4)
	b = append(b, server.AsSlice()...)
	return append(b, optEnd)
}

func TestParseOffer(t *testing.T) {
	disc := Discovery(7, testMAC)
	yi, srv := netip.MustParseAddr("172.22.0.23"), netip.MustParseAddr("172.22.0.1")
	o := ParseOffer(offerTo(disc, msgOffer, yi, srv), 7, testMAC)
	if o == nil || o.Address != yi || o.Server != srv {
		t.Fatalf("offer = %+v, want %s from %s", o, yi, srv)
	}
	other := net.HardwareAddr{0x52, 0x54, 0x00, 0, 0, 1}
	for name, c := range map[string]struct {
		msg []byte
		xid uint32
		mac net.HardwareAddr
	}{
		"another transaction": {offerTo(disc, msgOffer, yi, srv), 8, testMAC},
		"another machine":     {offerTo(disc, msgOffer, yi, srv), 7, other},
		"an ACK":              {offerTo(disc, 5, yi, srv), 7, testMAC},
		"the DISCOVER itself": {disc, 7, testMAC},
		"cut short":           {offerTo(disc, msgOffer, yi, srv)[:100], 7, testMAC},
		"no message type":     {append(offerTo(disc, msgOffer, yi, srv)[:fixedLen+4], optEnd), 7, testMAC},
		"a truncated option":  {append(offerTo(disc, msgOffer, yi, srv)[:fixedLen+4], optMsgType, 9, msgOffer), 7, testMAC},
	} {
		if o := ParseOffer(c.msg, c.xid, c.mac); o != nil {
			t.Errorf("%s: read as an offer: %+v", name, o)
		}
	}
}

// TestFrame: the DISCOVER's frame is a broadcast from the probe's MAC,
// IPv4 from 0.0.0.0 to 255.255.255.255 with a valid header checksum, UDP
// from 68 to 67; the DHCP message reads back out of a frame to port 68
// only.
func TestFrame(t *testing.T) {
	f := Frame(9, testMAC)
	if !bytes.Equal(f[0:6], broadcastMAC) || !bytes.Equal(f[6:12], testMAC) || binary.BigEndian.Uint16(f[12:]) != etherTypeIP4 {
		t.Errorf("Ethernet header % x", f[:14])
	}
	ip := f[ethLen : ethLen+ipLen]
	if !bytes.Equal(ip[12:16], []byte{0, 0, 0, 0}) || !bytes.Equal(ip[16:20], []byte{255, 255, 255, 255}) {
		t.Errorf("from %v to %v, want 0.0.0.0 to 255.255.255.255", ip[12:16], ip[16:20])
	}
	if checksum(ip) != 0 {
		t.Errorf("IPv4 header checksum does not add up: % x", ip)
	}
	if got := int(binary.BigEndian.Uint16(ip[2:])); got != len(f)-ethLen {
		t.Errorf("IPv4 length %d, want %d", got, len(f)-ethLen)
	}
	udp := f[ethLen+ipLen:]
	if binary.BigEndian.Uint16(udp[0:]) != 68 || binary.BigEndian.Uint16(udp[2:]) != 67 {
		t.Errorf("UDP ports % x, want 68 to 67", udp[:4])
	}
	if DHCPOf(f) != nil {
		t.Errorf("the DISCOVER (to port 67) read as a message to a client")
	}
	// The same frame turned to port 68 carries the DISCOVER.
	back := append([]byte(nil), f...)
	binary.BigEndian.PutUint16(back[ethLen+ipLen+2:], 68)
	if got := DHCPOf(back); !bytes.Equal(got, Discovery(9, testMAC)) {
		t.Errorf("DHCPOf = % x", got)
	}
	ip6 := append([]byte(nil), back...)
	binary.BigEndian.PutUint16(ip6[12:], 0x86dd)
	for name, g := range map[string][]byte{"short": back[:30], "not IPv4": ip6} {
		if DHCPOf(g) != nil {
			t.Errorf("%s: read as DHCP", name)
		}
	}
}
