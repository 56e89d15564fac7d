package vsite

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// bridge is the provisioning bridge inside the namespace; peer is the
// veth's far end, on the bridge.
const bridge = "br0"

// network makes the namespace, its bridge (with the BMCs' addresses) and the
// veth pair. Leftovers of an earlier site of the same names are removed
// first.
func (s *Site) network(ctx context.Context) error {
	o := s.opts
	s.removeNetwork(ctx)
	bits := strconv.Itoa(o.Network.Bits())
	peer := o.HostIface + "p"
	steps := [][]string{
		{"ip", "netns", "add", o.Netns},
		{"ip", "-n", o.Netns, "link", "set", "lo", "up"},
		{"ip", "-n", o.Netns, "link", "add", bridge, "type", "bridge"},
	}
	for _, a := range s.bmcAddrs() {
		steps = append(steps, []string{"ip", "-n", o.Netns, "addr", "add", a.String() + "/" + bits, "dev", bridge})
	}
	steps = append(steps, [][]string{
		{"ip", "-n", o.Netns, "link", "set", bridge, "up"},
		{"ip", "link", "add", o.HostIface, "type", "veth", "peer", "name", peer},
		{"ip", "link", "set", peer, "netns", o.Netns},
		{"ip", "-n", o.Netns, "link", "set", peer, "master", bridge},
		{"ip", "-n", o.Netns, "link", "set", peer, "up"},
		{"ip", "addr", "add", netip.PrefixFrom(o.HostAddr, o.Network.Bits()).String(), "dev", o.HostIface},
		{"ip", "link", "set", o.HostIface, "up"},
	}...)
	for _, argv := range steps {
		if _, err := run(ctx, argv...); err != nil {
			return fmt.Errorf("virtual site network: %w", err)
		}
	}
	return nil
}

// removeNetwork ends every process left in the namespace (the machines
// of a site whose owner died: libvirt's QEMU outlives libvirtd) and
// removes the namespace and the veth. This process is never among them:
// were its main thread left in the namespace (a thread of netns.Do that
// could not return), it would show there.
func (s *Site) removeNetwork(ctx context.Context) {
	if out, err := run(ctx, "ip", "netns", "pids", s.opts.Netns); err == nil {
		for _, f := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	run(ctx, "ip", "link", "del", s.opts.HostIface)
	run(ctx, "ip", "netns", "del", s.opts.Netns)
}
