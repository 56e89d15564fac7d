package dhcpprobe

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
)

// The fixed part of a BOOTP/DHCP message (RFC 2131) and what follows it.
const (
	opRequest    = 1
	opReply      = 2
	htypeEther   = 1
	flagBcast    = 0x8000
	fixedLen     = 236 // op .. file
	minLen       = 300 // BOOTP's smallest message; some servers want it
	offXID       = 4
	offFlags     = 10
	offYIAddr    = 16
	offCHAddr    = 28
	optPad       = 0
	optEnd       = 255
	optMsgType   = 53
	optServerID  = 54
	optParams    = 55
	optClientID  = 61
	msgDiscover  = 1
	msgOffer     = 2
	paramsRouter = 3
	paramsDNS    = 6
	paramsSubnet = 1
)

// magic starts the options (RFC 2131, 3).
var magic = []byte{99, 130, 83, 99}

// Discovery is a DHCPDISCOVER of transaction xid from the NIC mac, with
// the broadcast flag, its MAC as client identifier (as the deploy ramdisk
// sends it) and a request for subnet mask, router and DNS servers.
func Discovery(xid uint32, mac net.HardwareAddr) []byte {
	b := make([]byte, fixedLen, minLen)
	b[0], b[1], b[2] = opRequest, htypeEther, byte(len(mac))
	binary.BigEndian.PutUint32(b[offXID:], xid)
	binary.BigEndian.PutUint16(b[offFlags:], flagBcast)
	copy(b[offCHAddr:offCHAddr+16], mac)
	b = append(b, magic...)
	b = append(b, optMsgType, 1, msgDiscover)
	b = append(b, optClientID, byte(1+len(mac)), htypeEther)
	b = append(b, mac...)
	b = append(b, optParams, 3, paramsSubnet, paramsRouter, paramsDNS)
	b = append(b, optEnd)
	for len(b) < minLen {
		b = append(b, optPad)
	}
	return b
}

// Frame headers: Ethernet, IPv4 (no options), UDP.
const (
	ethLen       = 14
	ipLen        = 20
	udpLen       = 8
	etherTypeIP4 = 0x0800
	protoUDP     = 17
)

var broadcastMAC = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// Frame is the Ethernet frame of Discovery(xid, mac): from mac to every
// machine of the link, from 0.0.0.0:68 to 255.255.255.255:67, as a
// machine with no address sends it.
func Frame(xid uint32, mac net.HardwareAddr) []byte {
	dhcp := Discovery(xid, mac)
	b := make([]byte, ethLen+ipLen+udpLen, ethLen+ipLen+udpLen+len(dhcp))
	copy(b[0:6], broadcastMAC)
	copy(b[6:12], mac)
	binary.BigEndian.PutUint16(b[12:], etherTypeIP4)
	ip := b[ethLen : ethLen+ipLen]
	ip[0] = 0x45 // version 4, 5 words of header
	binary.BigEndian.PutUint16(ip[2:], uint16(ipLen+udpLen+len(dhcp)))
	ip[8], ip[9] = 64, protoUDP // TTL, protocol
	copy(ip[16:20], net.IPv4bcast.To4())
	binary.BigEndian.PutUint16(ip[10:], checksum(ip))
	udp := b[ethLen+ipLen:]
	binary.BigEndian.PutUint16(udp[0:], clientPort)
	binary.BigEndian.PutUint16(udp[2:], serverPort)
	binary.BigEndian.PutUint16(udp[4:], uint16(udpLen+len(dhcp)))
	// A UDP checksum of 0 is none, which IPv4 allows.
	return append(b, dhcp...)
}

// The DHCP ports.
const (
	serverPort = 67
	clientPort = 68
)

// checksum is the Internet checksum (RFC 1071) of an IPv4 header whose
// checksum field is zero.
func checksum(b []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

// DHCPOf is the DHCP message an Ethernet frame carries to a client (UDP
// to port 68 over IPv4); nil for any other frame.
func DHCPOf(frame []byte) []byte {
	if len(frame) < ethLen+ipLen+udpLen || binary.BigEndian.Uint16(frame[12:]) != etherTypeIP4 {
		return nil
	}
	ip := frame[ethLen:]
	ihl := int(ip[0]&0x0f) * 4
	if ip[0]>>4 != 4 || ihl < ipLen || ip[9] != protoUDP || len(ip) < ihl+udpLen {
		return nil
	}
	udp := ip[ihl:]
	n := int(binary.BigEndian.Uint16(udp[4:]))
	if binary.BigEndian.Uint16(udp[2:]) != clientPort || n < udpLen || n > len(udp) {
		return nil
	}
	return udp[udpLen:n]
}

// ParseOffer returns the offer msg makes to transaction xid of the NIC
// mac; nil when msg is no such offer (another machine's, another kind of
// message, or not DHCP).
func ParseOffer(msg []byte, xid uint32, mac net.HardwareAddr) *Offer {
	if len(msg) < fixedLen+len(magic) || msg[0] != opReply ||
		binary.BigEndian.Uint32(msg[offXID:]) != xid ||
		int(msg[2]) != len(mac) || !bytes.Equal(msg[offCHAddr:offCHAddr+len(mac)], mac) ||
		!bytes.Equal(msg[fixedLen:fixedLen+len(magic)], magic) {
		return nil
	}
	opts := options(msg[fixedLen+len(magic):])
	if t := opts[optMsgType]; len(t) != 1 || t[0] != msgOffer {
		return nil
	}
	o := &Offer{Address: netip.AddrFrom4([4]byte(msg[offYIAddr : offYIAddr+4]))}
	if id := opts[optServerID]; len(id) == 4 {
		o.Server = netip.AddrFrom4([4]byte(id))
	}
	return o
}

// options reads DHCP options (code, length, value) up to the end option
// or the end of b; a truncated one ends the list.
func options(b []byte) map[byte][]byte {
	out := map[byte][]byte{}
	for len(b) > 0 {
		code := b[0]
		switch code {
		case optEnd:
			return out
		case optPad:
			b = b[1:]
			continue
		}
		if len(b) < 2 || len(b) < 2+int(b[1]) {
			return out
		}
		out[code] = b[2 : 2+int(b[1])]
		b = b[2+int(b[1]):]
	}
	return out
}
