package vsite

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"slices"

	"github.com/bootstick/bootstick/internal/netns"
)

// listenIn listens on TCP address addr inside the namespace at nsPath.
// Connections to it are accepted (and served) by any thread.
func listenIn(nsPath, addr string) (net.Listener, error) {
	var ln net.Listener
	err := netns.Do(nsPath, func() error {
		var err error
		ln, err = net.Listen("tcp", addr)
		return err
	})
	return ln, err
}

// DialFrom connects to address over network ("tcp") from src, an address
// of the site's network that no machine of the site has: a machine on
// the provisioning network, as anyone who plugs into it would be. src is
// put on the site's bridge inside the namespace (ip addr replace: the
// same again changes nothing); the socket is made there, so nothing
// leaves the namespace but over the site's veth.
func (s *Site) DialFrom(ctx context.Context, src netip.Addr, network, address string) (net.Conn, error) {
	if !s.opts.Network.Contains(src) || src == s.opts.HostAddr || slices.Contains(s.bmcAddrs(), src) {
		return nil, fmt.Errorf("dialing from %s: not a free address of the site's network %s", src, s.opts.Network)
	}
	prefix := netip.PrefixFrom(src, s.opts.Network.Bits()).String()
	if _, err := run(ctx, "ip", "-n", s.opts.Netns, "addr", "replace", prefix, "dev", bridge); err != nil {
		return nil, fmt.Errorf("dialing from %s: %w", src, err)
	}
	var conn net.Conn
	err := netns.Do(filepath.Join("/run/netns", s.opts.Netns), func() error {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: src.AsSlice()}}
		var err error
		conn, err = d.DialContext(ctx, network, address)
		return err
	})
	return conn, err
}
