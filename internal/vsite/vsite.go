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
//   - virtualbmc's vbmcd, one IPMI BMC per domain whose BMC is ipmi, with
//     real power and boot-device control through libvirt;
//   - a Redfish BMC of this package (HTTPS, with virtual media) for every
//     domain whose BMC is redfish, served from this process on a socket
//     made inside the namespace.
//
// No other network of the machine is touched.
package vsite

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
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
	// BMCAddr is the address of every BMC whose machine names none.
	Network  netip.Prefix
	HostAddr netip.Addr
	BMCAddr  netip.Addr
	Machines []Machine
	// MachineNice is the niceness of the machines' QEMU, 1 to 19;
	// defaultMachineNice when zero. A site whose bootstrap machine is
	// itself a TCG guest gives it the CPU first with 19, so hosts that
	// boot together never starve the Ironic that drives them.
	MachineNice int
}

// Machine is one virtual bare-metal server.
type Machine struct {
	Name string
	// MAC is the boot NIC's address, on the provisioning network.
	MAC       string
	MemoryMiB int // 3072 when zero: the deploy ramdisk holds the image in memory
	CPUs      int // 1 when zero
	DiskGiB   int // 8 when zero; the disk starts blank
	// BMCAddr is the BMC's own address in the site's network, as a real
	// server's BMC has one; the site's BMCAddr when unset. Ironic spaces
	// its IPMI commands per address, so BMCs that share one wait for
	// each other.
	BMCAddr netip.Addr
	// BMCPort is the BMC's port on its address: UDP for IPMI, TCP (HTTPS)
	// for Redfish.
	BMCPort     int
	BMCUser     string // admin when empty (Redfish; the site file's default)
	BMCPassword string
	// Firmware is FirmwareBIOS (the default: SeaBIOS, pc), FirmwareUEFI
	// (OVMF, q35, the NICs' option ROMs off) or FirmwareUEFISecureBoot
	// (the same with OVMF's Secure Boot build and SMM, Microsoft's keys
	// enrolled and Secure Boot on, as a server ships; a Redfish BMC turns
	// it off and on).
	Firmware string
	// ExtraMACs are more NICs, all on the site's bridge, after the boot
	// NIC (MAC). They never boot.
	ExtraMACs []string
	// BMC is the BMC's protocol, as the host's BMC address names it:
	// BMCIPMI (the default, virtualbmc), BMCRedfish or
	// BMCRedfishVirtualMedia (both the same Redfish BMC; the second boots
	// by virtual media).
	BMC string
	// BMCBroken makes a Redfish BMC answer 500 to everything.
	BMCBroken bool
	// ClockAhead sets the machine's hardware clock this far ahead of UTC
	// (behind when negative), whole seconds, as a server's after a flat
	// CMOS battery or a wrong setting in its firmware.
	ClockAhead time.Duration
	// POST is how long the firmware waits before it boots, whole seconds
	// up to MaxPOST, as a real server spends minutes in its power-on self
	// test before its NIC asks for PXE. Ironic moves a host to its next
	// state after powering it on; a machine that boots at once can reach
	// Ironic before it does.
	POST time.Duration
}

// MaxPOST is the longest POST libvirt can hold a machine in: its boot
// menu's timeout, 65535 ms.
const MaxPOST = 65 * time.Second

// Machine.Firmware values.
const (
	FirmwareBIOS           = "bios"
	FirmwareUEFI           = "uefi"
	FirmwareUEFISecureBoot = "uefi-secureboot"
)

// Machine.BMC values: the schemes of the baremetal-operator's BMC
// addresses (pkg/hardwareutils/bmc).
const (
	BMCIPMI                = "ipmi"
	BMCRedfish             = "redfish"
	BMCRedfishVirtualMedia = "redfish-virtualmedia"
)

func (m Machine) redfish() bool { return m.BMC == BMCRedfish || m.BMC == BMCRedfishVirtualMedia }

// Site is a running virtual site.
type Site struct {
	opts        Options
	libvirt     *daemon
	vbmc        *daemon
	made        []string // mount points Start created, removed by Close
	ca          *bmcCA   // the Redfish BMCs' CA
	redfish     []*http.Server
	redfishLogs []*os.File
	// stopRedfish ends the Redfish BMCs' requests.
	stopRedfish context.CancelFunc
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

// Start makes the network, starts libvirtd, defines the machines, powered
// off, and starts their BMCs (vbmcd, the Redfish BMCs). Close undoes it
// all.
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
	if err := s.startRedfish(); err != nil {
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
	if o.MachineNice == 0 {
		o.MachineNice = defaultMachineNice
	}
	if o.MachineNice < 1 || o.MachineNice > 19 {
		return fmt.Errorf("virtual site: machine niceness %d is not 1 to 19", o.MachineNice)
	}
	// Defaults go into a copy: the caller's machines stay as given.
	o.Machines = slices.Clone(o.Machines)
	names, macs, ports := map[string]bool{}, map[string]bool{}, map[netip.AddrPort]bool{}
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
		if m.Firmware == "" {
			m.Firmware = FirmwareBIOS
		}
		if m.BMC == "" {
			m.BMC = BMCIPMI
		}
		if !m.BMCAddr.IsValid() {
			m.BMCAddr = o.BMCAddr
		}
		bmc := netip.AddrPortFrom(m.BMCAddr, uint16(m.BMCPort))
		m.ExtraMACs = append([]string(nil), m.ExtraMACs...)
		for j := range m.ExtraMACs {
			m.ExtraMACs[j] = strings.ToLower(m.ExtraMACs[j])
		}
		switch {
		case m.Name == "" || strings.ContainsAny(m.Name, "/ '\"<>&"):
			return fmt.Errorf("virtual site: machine %d: name %q is not a plain name", i, m.Name)
		case names[m.Name]:
			return fmt.Errorf("virtual site: two machines named %s", m.Name)
		case macs[m.MAC]:
			return fmt.Errorf("virtual site: machines %s and another share MAC %s", m.Name, m.MAC)
		case !o.Network.Contains(m.BMCAddr) || m.BMCAddr == o.HostAddr:
			return fmt.Errorf("virtual site: machine %s: BMC address %s is not in %s or is the host's", m.Name, m.BMCAddr, o.Network)
		case ports[bmc] || m.BMCPort <= 0 || m.BMCPort > 65535:
			return fmt.Errorf("virtual site: machine %s: BMC port %d on %s is taken or invalid", m.Name, m.BMCPort, m.BMCAddr)
		}
		if err := m.check(macs); err != nil {
			return fmt.Errorf("virtual site: machine %s: %w", m.Name, err)
		}
		names[m.Name], macs[m.MAC], ports[bmc] = true, true, true
	}
	return nil
}

// check checks the machine's firmware, BMC and extra NICs; macs are the
// MACs of the machines before it.
func (m *Machine) check(macs map[string]bool) error {
	switch {
	case m.Firmware != FirmwareBIOS && m.Firmware != FirmwareUEFI && m.Firmware != FirmwareUEFISecureBoot:
		return fmt.Errorf("firmware %q is not %s, %s or %s", m.Firmware, FirmwareBIOS, FirmwareUEFI, FirmwareUEFISecureBoot)
	case m.BMC != BMCIPMI && !m.redfish():
		return fmt.Errorf("BMC %q is not %s, %s or %s", m.BMC, BMCIPMI, BMCRedfish, BMCRedfishVirtualMedia)
	case m.BMCBroken && !m.redfish():
		return errors.New("only a Redfish BMC can be broken")
	case m.redfish() && strings.Contains(m.BMCUser, ":"):
		return errors.New("a Redfish BMC's user name cannot hold a colon (HTTP basic auth)")
	case m.POST < 0 || m.POST > MaxPOST || m.POST%time.Second != 0:
		return fmt.Errorf("POST %v is not whole seconds from 0 to %v", m.POST, MaxPOST)
	}
	if m.Firmware != FirmwareBIOS {
		for _, f := range []string{ovmfCode, ovmfVars, ovmfSecureBootCode, ovmfSecureBootVars} {
			if _, err := os.Stat(f); err != nil {
				return fmt.Errorf("UEFI firmware: %w (Debian package ovmf; run bash .ci/install-deps)", err)
			}
		}
	}
	own := map[string]bool{m.MAC: true}
	for _, mac := range m.ExtraMACs {
		if _, err := net.ParseMAC(mac); err != nil || macs[mac] || own[mac] {
			return fmt.Errorf("extra NIC %q is not a MAC address of its own", mac)
		}
		own[mac] = true
	}
	for mac := range own {
		if mac != m.MAC {
			macs[mac] = true
		}
	}
	return nil
}

// Close powers every machine off and removes the daemons, the network and
// the mount points it made. The disks and logs stay in Dir.
func (s *Site) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errs []error
	s.closeRedfish(ctx)
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

// BMCAddress is the machine's BMC as a BareMetalHost names it:
// ipmi://ADDR:PORT, or redfish+https://ADDR:PORT/redfish/v1/Systems/NAME
// (redfish-virtualmedia+https://… for virtual media).
func (s *Site) BMCAddress(m Machine) string {
	hostPort := netip.AddrPortFrom(s.bmcAddr(m), uint16(m.BMCPort))
	if m.redfish() {
		return fmt.Sprintf("%s+https://%s%s", m.BMC, hostPort, systemPath(m.Name))
	}
	return fmt.Sprintf("ipmi://%s", hostPort)
}

// bmcAddr is m's BMC address: its own, or the site's.
func (s *Site) bmcAddr(m Machine) netip.Addr {
	if m.BMCAddr.IsValid() {
		return m.BMCAddr
	}
	return s.opts.BMCAddr
}

// bmcAddrs are the site's BMC addresses, each once, the site's first.
func (s *Site) bmcAddrs() []netip.Addr {
	addrs := []netip.Addr{s.opts.BMCAddr}
	for _, m := range s.opts.Machines {
		if a := s.bmcAddr(m); !slices.Contains(addrs, a) {
			addrs = append(addrs, a)
		}
	}
	return addrs
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
