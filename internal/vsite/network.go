package vsite

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
)

// bridge is the provisioning bridge inside the namespace; peer is the
// veth's far end, on the bridge.
const bridge = "br0"

// network makes the namespace, its bridge (with the BMC address) and the
// veth pair. Leftovers of an earlier site of the same names are removed
// first.
func (s *Site) network(ctx context.Context) error {
	o := s.opts
	run(ctx, "ip", "link", "del", o.HostIface)
	run(ctx, "ip", "netns", "del", o.Netns)
	bits := strconv.Itoa(o.Network.Bits())
	peer := o.HostIface + "p"
	steps := [][]string{
		{"ip", "netns", "add", o.Netns},
		{"ip", "-n", o.Netns, "link", "set", "lo", "up"},
		{"ip", "-n", o.Netns, "link", "add", bridge, "type", "bridge"},
		{"ip", "-n", o.Netns, "addr", "add", o.BMCAddr.String() + "/" + bits, "dev", bridge},
		{"ip", "-n", o.Netns, "link", "set", bridge, "up"},
		{"ip", "link", "add", o.HostIface, "type", "veth", "peer", "name", peer},
		{"ip", "link", "set", peer, "netns", o.Netns},
		{"ip", "-n", o.Netns, "link", "set", peer, "master", bridge},
		{"ip", "-n", o.Netns, "link", "set", peer, "up"},
		{"ip", "addr", "add", netip.PrefixFrom(o.HostAddr, o.Network.Bits()).String(), "dev", o.HostIface},
		{"ip", "link", "set", o.HostIface, "up"},
	}
	for _, argv := range steps {
		if _, err := run(ctx, argv...); err != nil {
			return fmt.Errorf("virtual site network: %w", err)
		}
	}
	return nil
}
