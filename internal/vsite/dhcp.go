package vsite

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"time"

	"github.com/bootstick/bootstick/internal/dhcpprobe"
)

// probeIface is the NIC of the machine DHCPDiscover plays, inside the
// namespace; its veth peer is on the bridge.
const probeIface = "dprobe"

// DHCPDiscover asks the provisioning network's DHCP server for an address
// as a machine whose NIC has the MAC mac would: from a NIC of that MAC on
// the site's bridge (a veth made inside the namespace, removed after),
// with no address, by package dhcpprobe. It waits up to wait for an offer;
// Result.Offer is nil when none came. Nothing leaves the namespace but
// over the site's own veth to this machine.
func (s *Site) DHCPDiscover(ctx context.Context, mac string, wait time.Duration) (dhcpprobe.Result, error) {
	hw, err := net.ParseMAC(mac)
	if err != nil {
		return dhcpprobe.Result{}, fmt.Errorf("DHCP probe: %w", err)
	}
	ns, peer := s.opts.Netns, probeIface+"p"
	run(ctx, "ip", "-n", ns, "link", "del", probeIface) // an earlier probe's
	defer run(context.WithoutCancel(ctx), "ip", "-n", ns, "link", "del", probeIface)
	for _, argv := range [][]string{
		{"ip", "-n", ns, "link", "add", probeIface, "address", hw.String(), "type", "veth", "peer", "name", peer},
		// No IPv6 link-local address: the probe's NIC says nothing but its
		// DISCOVERs.
		{"ip", "-n", ns, "link", "set", probeIface, "addrgenmode", "none"},
		{"ip", "-n", ns, "link", "set", peer, "addrgenmode", "none"},
		{"ip", "-n", ns, "link", "set", peer, "master", bridge},
		{"ip", "-n", ns, "link", "set", peer, "up"},
		{"ip", "-n", ns, "link", "set", probeIface, "up"},
	} {
		if _, err := run(ctx, argv...); err != nil {
			return dhcpprobe.Result{}, fmt.Errorf("DHCP probe: %w", err)
		}
	}
	return dhcpprobe.DiscoverIn(ctx, filepath.Join("/run/netns", ns), probeIface, hw, wait)
}
