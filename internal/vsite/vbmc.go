package vsite

import (
	"context"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// startVBMC writes one virtualbmc configuration per IPMI machine (its own
// files, 0600: no password on a command line) and runs vbmcd in the
// namespace, which starts every BMC marked active. A site with no IPMI
// machine runs no vbmcd.
func (s *Site) startVBMC(ctx context.Context) error {
	dir := filepath.Join(s.opts.Dir, "vbmc")
	os.RemoveAll(dir)
	var ipmi []Machine
	for _, m := range s.opts.Machines {
		if m.BMC == BMCIPMI {
			ipmi = append(ipmi, m)
		}
	}
	if len(ipmi) == 0 {
		return nil
	}
	for _, m := range ipmi {
		if strings.ContainsAny(m.BMCUser+m.BMCPassword, "\n\r%") {
			return fmt.Errorf("machine %s: the BMC's user name or password holds a newline or %%", m.Name)
		}
		if err := os.MkdirAll(filepath.Join(dir, m.Name), 0o700); err != nil {
			return fmt.Errorf("virtualbmc: %w", err)
		}
		conf := fmt.Sprintf("[VirtualBMC]\nusername = %s\npassword = %s\naddress = %s\nport = %d\ndomain_name = %s\nlibvirt_uri = %s\nactive = True\n",
			m.BMCUser, m.BMCPassword, s.bmcAddr(m), m.BMCPort, m.Name, s.uri())
		if err := os.WriteFile(filepath.Join(dir, m.Name, "config"), []byte(conf), 0o600); err != nil {
			return fmt.Errorf("virtualbmc: %w", err)
		}
	}
	main := filepath.Join(s.opts.Dir, "virtualbmc.conf")
	conf := fmt.Sprintf("[default]\nconfig_dir = %s\npid_file = %s\nserver_port = 50891\n[log]\nlogfile = %s\n",
		dir, filepath.Join(s.opts.Dir, "vbmcd.pid"), filepath.Join(s.opts.Dir, "vbmcd.log"))
	if err := os.WriteFile(main, []byte(conf), 0o600); err != nil {
		return fmt.Errorf("virtualbmc: %w", err)
	}
	os.Remove(filepath.Join(s.opts.Dir, "vbmcd.pid"))
	d, err := startDaemon("vbmcd", filepath.Join(s.opts.Dir, "vbmcd.out"), []string{"VIRTUALBMC_CONFIG=" + main},
		"ip", "netns", "exec", s.opts.Netns, "vbmcd", "--foreground")
	if err != nil {
		return err
	}
	s.vbmc = d
	// vbmcd logs "Started vBMC instance" when it forks a BMC's process,
	// before that process binds its port: a BMC is up when its UDP
	// socket is bound in the namespace (CI saw a probe refused between
	// the two).
	return d.wait(ctx, time.Minute, func() bool {
		bound, err := udpBound(d.cmd.Process.Pid)
		if err != nil {
			return false
		}
		for _, m := range ipmi {
			if !bound.listens(netip.AddrPortFrom(s.bmcAddr(m), uint16(m.BMCPort))) {
				return false
			}
		}
		return true
	})
}

// udpSockets are the local addresses of a network namespace's UDP sockets.
type udpSockets []netip.AddrPort

// listens says whether a socket receives on ap: bound to its address
// (IPv4 or IPv4-mapped) or to every address, on its port.
func (u udpSockets) listens(ap netip.AddrPort) bool {
	for _, b := range u {
		if b.Port() == ap.Port() && (b.Addr().Unmap() == ap.Addr().Unmap() || b.Addr().IsUnspecified()) {
			return true
		}
	}
	return false
}

// udpBound reads the UDP sockets of the network namespace process pid is
// in, from /proc/PID/net/udp and udp6 (addresses in the kernel's hex, each
// 32-bit word in this machine's byte order: little-endian on amd64 and
// arm64).
func udpBound(pid int) (udpSockets, error) {
	var out udpSockets
	for _, f := range []string{"udp", "udp6"} {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, f))
		if err != nil {
			return nil, err
		}
		for _, line := range strings.Split(string(data), "\n")[1:] {
			fields := strings.Fields(line)
			if len(fields) < 2 {
				continue
			}
			if ap, ok := parseProcAddr(fields[1]); ok {
				out = append(out, ap)
			}
		}
	}
	return out, nil
}

// parseProcAddr reads /proc/net/udp's "0200170A:1860".
func parseProcAddr(s string) (netip.AddrPort, bool) {
	hexAddr, hexPort, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, false
	}
	raw, err := hex.DecodeString(hexAddr)
	if err != nil || len(raw) != 4 && len(raw) != 16 {
		return netip.AddrPort{}, false
	}
	port, err := strconv.ParseUint(hexPort, 16, 16)
	if err != nil {
		return netip.AddrPort{}, false
	}
	for i := 0; i < len(raw); i += 4 {
		raw[i], raw[i+1], raw[i+2], raw[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
	}
	addr, _ := netip.AddrFromSlice(raw)
	return netip.AddrPortFrom(addr, uint16(port)), true
}
