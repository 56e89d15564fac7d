// Package dhcpprobe asks a DHCP server for an address as a machine with a
// given MAC would, and says whether it offered one: a test's look at which
// machines the provisioning network's DHCP answers. It sends one
// DHCPDISCOVER and reads the answers; it never takes an address (no
// DHCPREQUEST), so the server keeps no lease for the probe.
//
// It speaks Ethernet frames on a packet socket, as a DHCP client does: the
// DISCOVER leaves from 0.0.0.0 and from the probe's MAC whatever the
// interface's own addresses are (a UDP socket would take the source
// address of another interface of the namespace).
package dhcpprobe

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"
)

// Result is what came of one DHCPDISCOVER.
type Result struct {
	// XID is the DISCOVER's transaction id: dnsmasq's log-dhcp lines of
	// the exchange start with it, in decimal.
	XID uint32
	// Offer is the server's DHCPOFFER, nil when none came in time.
	Offer *Offer
}

// Offer is a DHCPOFFER.
type Offer struct {
	// Address is the address offered (yiaddr).
	Address netip.Addr
	// Server is the server's identifier (option 54), its address.
	Server netip.Addr
}

// Discover broadcasts a DHCPDISCOVER from the NIC mac on the interface
// iface (from 0.0.0.0:68, with the broadcast flag, so the server
// broadcasts its answer to a machine with no address), and waits up to
// wait for an offer to it. As a DHCP client does, it sends the DISCOVER
// again, with the same transaction id, each Resend while no offer came:
// a link just made may drop the first. No offer in that time is no
// error: Result.Offer is nil.
//
// The socket is made in the network namespace of the calling thread:
// call it from a thread locked in the namespace where iface is
// (DiscoverIn). Root only (a packet socket).
func Discover(ctx context.Context, iface string, mac net.HardwareAddr, wait time.Duration) (Result, error) {
	xid, err := newXID()
	if err != nil {
		return Result{}, err
	}
	r := Result{XID: xid}
	s, err := openPacket(iface)
	if err != nil {
		return r, fmt.Errorf("DHCP probe on %s: %w", iface, err)
	}
	defer unix.Close(s.fd)
	deadline := time.Now().Add(wait)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	for time.Now().Before(deadline) && r.Offer == nil {
		if err := s.send(Frame(xid, mac)); err != nil {
			return r, fmt.Errorf("DHCP probe on %s: sending DHCPDISCOVER: %w", iface, err)
		}
		next := time.Now().Add(Resend)
		if next.After(deadline) {
			next = deadline
		}
		if r.Offer, err = s.awaitOffer(ctx, next, xid, mac); err != nil {
			return r, fmt.Errorf("DHCP probe on %s: %w", iface, err)
		}
	}
	return r, nil
}

// Resend is how long Discover waits for an offer before it sends the
// DISCOVER again.
const Resend = time.Second

// packetSocket is a packet socket on one interface that sends and reads
// whole Ethernet frames of IPv4.
type packetSocket struct {
	fd      int
	ifindex int
}

// openPacket opens a packet socket for IPv4 frames on iface.
func openPacket(iface string) (*packetSocket, error) {
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return nil, err
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_IP)))
	if err != nil {
		return nil, fmt.Errorf("a packet socket: %w (root only)", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_IP), Ifindex: ifi.Index}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("binding a packet socket: %w", err)
	}
	return &packetSocket{fd: fd, ifindex: ifi.Index}, nil
}

func (s *packetSocket) send(frame []byte) error {
	to := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_IP), Ifindex: s.ifindex, Halen: 6}
	copy(to.Addr[:], broadcastMAC)
	return unix.Sendto(s.fd, frame, 0, to)
}

// awaitOffer reads frames until an offer for xid and mac comes, or the
// deadline passes (nil, no error), or ctx ends. Every other frame (an
// answer to another machine, the DISCOVER itself) is skipped.
func (s *packetSocket) awaitOffer(ctx context.Context, deadline time.Time, xid uint32, mac net.HardwareAddr) (*Offer, error) {
	buf := make([]byte, 2048)
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, nil
		}
		fds := []unix.PollFd{{Fd: int32(s.fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(left.Milliseconds())+1)
		if errors.Is(err, unix.EINTR) || err == nil && n == 0 {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("waiting for answers: %w", err)
		}
		m, _, err := unix.Recvfrom(s.fd, buf, 0)
		if err != nil {
			return nil, fmt.Errorf("reading answers: %w", err)
		}
		if o := ParseOffer(DHCPOf(buf[:m]), xid, mac); o != nil {
			return o, nil
		}
	}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func newXID() (uint32, error) {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return 0, fmt.Errorf("DHCP probe: a transaction id: %w", err)
	}
	return binary.BigEndian.Uint32(b[:]), nil
}
