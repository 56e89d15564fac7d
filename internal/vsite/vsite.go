// Package vsite makes a virtual site: bare-metal machines in QEMU with a
// BMC each, on a provisioning network of their own, for the tests and for
// a developer who wants a site to provision.
//
// Everything lives in a network namespace the site creates:
//
//   - a bridge, with the BMCs' address on it;
//   - the far end of a veth pair whose near end (HostIface, with HostAddr)
//     stays on this machine, where firstboot, Ironic and its DHCP run;
//   - libvirtd (with QEMU under TCG), whose domains' NICs are taps on the
//     bridge. libvirtd runs in a mount namespace of its own too, with its
//     configuration, sockets and state under Dir: the machine's own
//     libvirt, if any, is neither read nor changed;
//   - virtualbmc's vbmcd, one IPMI BMC per domain, with real power and
//     boot-device control through libvirt.
//
// No other network of the machine is touched.
package vsite

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/bootstick/bootstick/internal/command"
)

// Options describe a virtual site.
type Options struct {
	// Dir keeps the disks, the consoles and the daemons' state.
	Dir string
	// Netns names the network namespace (made, and removed by Close).
	Netns string
	// HostIface is this machine's end of the veth, given HostAddr.
	HostIface string
	// Network is the provisioning network; HostAddr and BMCAddr are in it.
	Network  netip.Prefix
	HostAddr netip.Addr
	BMCAddr  netip.Addr
	Machines []Machine
}

// Machine is one virtual bare-metal server.
type Machine struct {
	Name string
	// MAC is the boot NIC's address, on the provisioning network.
	MAC       string
	MemoryMiB int // 3072 when zero: the deploy ramdisk holds the image in memory
	CPUs      int // 1 when zero
	DiskGiB   int // 8 when zero; the disk starts blank
	// BMCPort is the IPMI port on BMCAddr (UDP).
	BMCPort     int
	BMCUser     string
	BMCPassword string
}

// Site is a running virtual site.
type Site struct {
	opts    Options
	libvirt *daemon
	vbmc    *daemon
	made    []string // mount points Start created, removed by Close
}

// Requirements are the programs a site needs, with the Debian package of
// each (.ci/install-deps installs them).
var Requirements = map[string]string{
	"libvirtd":           "libvirt-daemon-system",
	"virsh":              "libvirt-clients",
	"vbmcd":              "virtualbmc",
	"qemu-system-x86_64": "qemu-system-x86",
	"qemu-img":           "qemu-utils",
	"unshare":            "util-linux",
	"ip":                 "iproute2",
}

// Start makes the network, starts libvirtd and vbmcd, and defines the
// machines, powered off. Close undoes it all.
func Start(ctx context.Context, o Options) (*Site, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	s := &Site{opts: o}
	ok := false
	defer func() {
		if !ok {
			s.Close()
		}
	}()
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("virtual site: %w", err)
	}
	if err := s.network(ctx); err != nil {
		return nil, err
	}
	if err := s.startLibvirt(ctx); err != nil {
		return nil, err
	}
	for _, m := range o.Machines {
		if err := s.define(ctx, m); err != nil {
			return nil, err
		}
	}
	if err := s.startVBMC(ctx); err != nil {
		return nil, err
	}
	ok = true
	return s, nil
}

func (o *Options) check() error {
	for prog, pkg := range Requirements {
		if _, err := lookPath(prog); err != nil {
			return fmt.Errorf("virtual site: %s is not installed (Debian package %s; run bash .ci/install-deps)", prog, pkg)
		}
	}
	if !o.Network.Contains(o.HostAddr) || !o.Network.Contains(o.BMCAddr) || o.HostAddr == o.BMCAddr {
		return fmt.Errorf("virtual site: host address %s and BMC address %s must be two addresses in %s", o.HostAddr, o.BMCAddr, o.Network)
	}
	if o.Dir == "" || o.Netns == "" || o.HostIface == "" {
		return errors.New("virtual site: Dir, Netns and HostIface are required")
	}
	names, macs, ports := map[string]bool{}, map[string]bool{}, map[int]bool{}
	for i := range o.Machines {
		m := &o.Machines[i]
		if m.MemoryMiB == 0 {
			m.MemoryMiB = 3072
		}
		if m.CPUs == 0 {
			m.CPUs = 1
		}
		if m.DiskGiB == 0 {
			m.DiskGiB = 8
		}
		m.MAC = strings.ToLower(m.MAC)
		switch {
		case m.Name == "" || strings.ContainsAny(m.Name, "/ '\"<>&"):
			return fmt.Errorf("virtual site: machine %d: name %q is not a plain name", i, m.Name)
		case names[m.Name]:
			return fmt.Errorf("virtual site: two machines named %s", m.Name)
		case macs[m.MAC]:
			return fmt.Errorf("virtual site: machines %s and another share MAC %s", m.Name, m.MAC)
		case ports[m.BMCPort] || m.BMCPort <= 0:
			return fmt.Errorf("virtual site: machine %s: BMC port %d is taken or invalid", m.Name, m.BMCPort)
		}
		names[m.Name], macs[m.MAC], ports[m.BMCPort] = true, true, true
	}
	return nil
}

// Close powers every machine off and removes the daemons, the network and
// the mount points it made. The disks and logs stay in Dir.
func (s *Site) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errs []error
	if s.libvirt != nil {
		for _, m := range s.opts.Machines {
			s.virsh(ctx, "destroy", m.Name)
		}
	}
	for _, d := range []*daemon{s.vbmc, s.libvirt} {
		if d != nil {
			if err := d.stop(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	s.removeNetwork(ctx)
	for i := len(s.made) - 1; i >= 0; i-- {
		os.Remove(s.made[i])
	}
	return errors.Join(errs...)
}

// BMCAddress is the machine's BMC as a BareMetalHost names it.
func (s *Site) BMCAddress(m Machine) string {
	return fmt.Sprintf("ipmi://%s", netip.AddrPortFrom(s.opts.BMCAddr, uint16(m.BMCPort)))
}

// SerialLog is the file that holds the machine's serial console.
func (s *Site) SerialLog(name string) string {
	return filepath.Join(s.opts.Dir, name+".serial.log")
}

// PowerState is libvirt's state of the machine: "running", "shut off", ...
func (s *Site) PowerState(ctx context.Context, name string) (string, error) {
	out, err := s.virsh(ctx, "domstate", name)
	return strings.TrimSpace(string(out)), err
}

// run runs argv and returns its standard output alone: what a tool says on
// standard error (virsh's polkit warning when libvirtd answers slowly) is
// never read as its answer. A failure's error carries both.
func run(ctx context.Context, argv ...string) ([]byte, error) {
	return command.Output(ctx, command.Options{}, argv...)
}
