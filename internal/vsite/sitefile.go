package vsite

import (
	"fmt"
	"maps"
	"net"
	"net/netip"

	"go.yaml.in/yaml/v3"
)

// SiteHost is how a machine appears in the site file: the machine's own
// BMC and MAC unless overridden (the fault tests give a wrong password, a
// BMC nobody answers, or a MAC no NIC has).
type SiteHost struct {
	Machine string
	// Address, when valid, is the host's static address on the
	// provisioning network (network data for cloud-init); else DHCP.
	Address netip.Addr
	Role    string // master when empty
	// Overrides.
	BMCAddress, BMCPassword, BootMAC string
	Image                            *SiteImage
}

// SiteImage is the OS image every host gets.
type SiteImage struct {
	URL, Format string
	Checksum    string // SHA-256, hex
	Bundled     string
}

// SiteConfig is what a site file says besides the machines.
type SiteConfig struct {
	Cluster string
	Image   SiteImage
	Hosts   []SiteHost
	// DHCPStart and DHCPEnd are the range the deploy ramdisks get.
	DHCPStart, DHCPEnd netip.Addr
	// Bootstrap, when set, is the site's whole bootstrap section (a stick
	// in QEMU names its own NICs and data disk); else firstboot runs in
	// host mode on this machine, on HostIface with HostAddr.
	Bootstrap map[string]any
	// SSHAuthorizedKeys are extra keys for the appliance and the hosts.
	SSHAuthorizedKeys []string
	// BMCCAFile is the site file's bootstrap.bmcCAFile when the site has
	// Redfish BMCs: BMCCAFile() (absolute) when empty. A stick's site
	// names a copy beside the site file.
	BMCCAFile string
	// ControlPlaneVIP is the site's cluster.controlPlaneVIP ("" for none).
	ControlPlaneVIP string
	// DHCPHosts is the site's bootstrap.provisioning.dhcpHosts ("" for
	// the default: the site's hosts only).
	DHCPHosts string
}

// SiteFile is a site file for the machines: the bootstrap, a DHCP range
// for the deploy ramdisks, and one host per SiteHost.
func (s *Site) SiteFile(c SiteConfig) ([]byte, error) {
	type m = map[string]any
	image, hosts := c.Image, c.Hosts
	machines := map[string]Machine{}
	for _, mc := range s.opts.Machines {
		machines[mc.Name] = mc
	}
	var list []m
	for _, h := range hosts {
		mc, ok := machines[h.Machine]
		if !ok && (h.BMCAddress == "" || h.BootMAC == "") {
			return nil, fmt.Errorf("site file: no machine %s (and no BMC address and boot MAC of its own)", h.Machine)
		}
		bmc, pw, mac := s.BMCAddress(mc), mc.BMCPassword, mc.MAC
		user := mc.BMCUser
		if h.BMCAddress != "" {
			bmc = h.BMCAddress
		}
		if h.BMCPassword != "" {
			pw = h.BMCPassword
		}
		if h.BootMAC != "" {
			mac = h.BootMAC
		}
		if user == "" {
			user = "admin"
		}
		role := h.Role
		if role == "" {
			role = "master"
		}
		im := image
		if h.Image != nil {
			im = *h.Image
		}
		img := m{}
		if im.Bundled != "" {
			img["bundled"] = im.Bundled
		} else {
			img = m{"url": im.URL, "checksum": im.Checksum, "checksumType": "sha256", "format": im.Format}
		}
		host := m{
			"name": h.Machine, "role": role,
			"bmc":            m{"address": bmc, "credentials": m{"username": user, "password": pw}},
			"bootMACAddress": mac,
			"image":          img,
		}
		// The boot mode the machine's firmware has, as an operator would
		// write it (the site's default is UEFI).
		switch mc.Firmware {
		case FirmwareBIOS:
			host["bootMode"] = "legacy"
		case FirmwareUEFI:
			host["bootMode"] = "UEFI"
		case FirmwareUEFISecureBoot:
			host["bootMode"] = "UEFISecureBoot"
		}
		if h.Address.IsValid() {
			mask := net.IP(net.CIDRMask(s.opts.Network.Bits(), 32))
			host["networkData"] = m{
				"links": []m{{"id": "prov", "type": "phy", "ethernet_mac_address": mac}},
				// The default route goes to the bootstrap machine: Kubernetes
				// needs one on every node (kube-proxy, flannel and kubelet
				// pick the node's address from it).
				"networks": []m{{"id": "prov-ipv4", "type": "ipv4", "link": "prov", "network_id": "prov", "ip_address": h.Address.String(), "netmask": mask.String(),
					"routes": []m{{"network": "0.0.0.0", "netmask": "0.0.0.0", "gateway": s.opts.HostAddr.String()}}}},
				"services": []m{},
			}
		}
		list = append(list, host)
	}
	bootstrap := maps.Clone(c.Bootstrap)
	if bootstrap == nil {
		bootstrap = m{
			"provisioning": m{
				"interface": s.opts.HostIface,
				"address":   netip.PrefixFrom(s.opts.HostAddr, s.opts.Network.Bits()).String(),
			},
			"dataDisk": "/dev/disk/by-id/unused-in-host-mode",
		}
	}
	if s.ca != nil {
		ca := c.BMCCAFile
		if ca == "" {
			ca = s.BMCCAFile()
		}
		bootstrap["bmcCAFile"] = ca
	}
	if p, ok := bootstrap["provisioning"].(map[string]any); ok && (c.DHCPStart.IsValid() || c.DHCPHosts != "") {
		p = maps.Clone(p) // the caller's map stays as it was
		if c.DHCPStart.IsValid() {
			p["dhcpRange"] = m{"start": c.DHCPStart.String(), "end": c.DHCPEnd.String()}
		}
		if c.DHCPHosts != "" {
			p["dhcpHosts"] = c.DHCPHosts
		}
		bootstrap["provisioning"] = p
	}
	doc := m{
		"apiVersion": "bootstick.dev/v1alpha1",
		"kind":       "Site",
		"bootstrap":  bootstrap,
		"hosts":      list,
		"cluster":    m{"name": c.Cluster},
	}
	if c.ControlPlaneVIP != "" {
		doc["cluster"].(m)["controlPlaneVIP"] = c.ControlPlaneVIP
	}
	if len(c.SSHAuthorizedKeys) > 0 {
		doc["sshAuthorizedKeys"] = c.SSHAuthorizedKeys
	}
	return yaml.Marshal(doc)
}
