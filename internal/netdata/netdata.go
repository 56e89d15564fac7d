// Package netdata is a host's network configuration, typed once: OpenStack's
// network_data.json, the one format both readers of a host's network data
// take (Ironic, which puts it on a virtual-media host's boot ISO for the
// deploy ramdisk, and cloud-init's ConfigDrive datasource in the OS image).
//
// Parse reads a site's networkData in that format, or in netplan's version
// 2 (ethernets, bonds, VLANs), which it converts. It accepts only what it
// can write so that Ironic's schema (ironic/api/controllers/v1/
// network-data-schema.json), cloud-init's reader (convert_net_json) and the
// ramdisk's bootstick-netdata all take it and read it alike (the ramdisk
// leaves out bond_miimon, a network's own DNS servers and the MACs of
// bonds and VLANs, which it lets the kernel choose); every
// refusal names its field path and what to do. The derived facts a site
// needs (addresses for the range checks, whether a NIC is static, the
// node's cluster address, gateway and DNS servers) are methods here.
package netdata

import (
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// LinkType is the kind of an L2 link.
type LinkType string

// The link types the stick writes: a NIC, a bond of NICs, a VLAN on a NIC
// or a bond. (Ironic's schema also names bridge, ovs, tap, vif and others,
// which only a cloud's hypervisor makes, and which cloud-init treats as
// phy.)
const (
	Phy  LinkType = "phy"
	Bond LinkType = "bond"
	VLAN LinkType = "vlan"
)

// NetworkType is how a link gets its address.
type NetworkType string

// The network types: a static address, DHCP, or IPv6 router
// advertisements (ipv6_slaac, which OpenStack input may name; netplan's
// form has no way to ask for it alone).
const (
	IPv4      NetworkType = "ipv4"
	IPv6      NetworkType = "ipv6"
	IPv4DHCP  NetworkType = "ipv4_dhcp"
	IPv6DHCP  NetworkType = "ipv6_dhcp"
	IPv6SLAAC NetworkType = "ipv6_slaac"
)

// Static says whether the network gives its link a fixed address.
func (t NetworkType) Static() bool { return t == IPv4 || t == IPv6 }

// DHCP says whether the network asks a DHCP server for its address.
func (t NetworkType) DHCP() bool { return t == IPv4DHCP || t == IPv6DHCP }

// V6 says whether the network is an IPv6 one.
func (t NetworkType) V6() bool { return t == IPv6 || t == IPv6DHCP || t == IPv6SLAAC }

// BondModes are the Linux bonding modes, as both Ironic's schema and
// netplan name them.
var BondModes = []string{"802.3ad", "active-backup", "balance-alb", "balance-rr", "balance-tlb", "balance-xor", "broadcast"}

// NetworkData is OpenStack's network_data.json. Parse makes it valid;
// every address and MAC in it is in its canonical form (MACs lower case
// with colons).
type NetworkData struct {
	Links    []Link    `json:"links"`
	Networks []Network `json:"networks"`
	Services []Service `json:"services"`

	// named are the addresses as the site file names them, with their
	// field paths (set by Parse).
	named []Address
}

// Link is an L2 interface: a NIC (phy), a bond or a VLAN.
type Link struct {
	ID   string   `json:"id"`
	Type LinkType `json:"type"`
	// EthernetMAC is a NIC's MAC, or a bond's (one of its members').
	EthernetMAC string `json:"ethernet_mac_address,omitempty"`
	MTU         int    `json:"mtu,omitempty"`
	BondMode    string `json:"bond_mode,omitempty"`
	// BondLinks are the ids of a bond's member NICs.
	BondLinks []string `json:"bond_links,omitempty"`
	// BondMIIMon is the MII monitoring interval in milliseconds. Ironic's
	// schema does not name it (nor refuse it); cloud-init passes every
	// bond_ key on as a bonding parameter (bond-miimon).
	BondMIIMon int    `json:"bond_miimon,omitempty"`
	VLANLink   string `json:"vlan_link,omitempty"`
	VLANID     int    `json:"vlan_id,omitempty"`
	VLANMAC    string `json:"vlan_mac_address,omitempty"`
}

// Network is an L3 network on a link: a static address or DHCP.
type Network struct {
	ID        string      `json:"id"`
	Type      NetworkType `json:"type"`
	Link      string      `json:"link"`
	NetworkID string      `json:"network_id"`
	IPAddress string      `json:"ip_address,omitempty"`
	// Netmask is dotted for IPv4 (255.255.255.0) and in address form for
	// IPv6 (ffff:ffff:ffff:ffff::), the forms Ironic's schema takes and
	// cloud-init reads.
	Netmask string  `json:"netmask,omitempty"`
	Routes  []Route `json:"routes,omitempty"`
	// Services are DNS servers of this network only (cloud-init reads
	// them; the deploy ramdisk reads only the top-level ones).
	Services []Service `json:"services,omitempty"`
}

// Route is a static route of a network; network and netmask 0.0.0.0 (or
// :: and ::) make the default route.
type Route struct {
	Network string `json:"network"`
	Netmask string `json:"netmask"`
	Gateway string `json:"gateway"`
}

// Service is a DNS server.
type Service struct {
	Type    string `json:"type"`
	Address string `json:"address"`
}

// DNS is the only service type network_data.json knows.
const DNS = "dns"

// JSON is the network data as the host's config drive carries it
// (openstack/latest/network_data.json).
func (nd *NetworkData) JSON() ([]byte, error) {
	out := *nd
	// Ironic's schema requires all three lists, empty or not.
	if out.Links == nil {
		out.Links = []Link{}
	}
	if out.Networks == nil {
		out.Networks = []Network{}
	}
	if out.Services == nil {
		out.Services = []Service{}
	}
	b, err := json.MarshalIndent(&out, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("writing network_data.json: %w", err)
	}
	return append(b, '\n'), nil
}

// Parse reads a host's networkData, at path p of the site file, in
// OpenStack's form (links, networks, services) or in netplan's version 2
// (ethernets, bonds, vlans, optionally under a top-level network key),
// which it converts. bootMAC is the host's boot NIC's MAC, which messages
// suggest where a NIC needs one. Each problem names its field and what to
// do.
//
// With problems, the model is incomplete (or nil, when raw is not network
// data at all): never write it out. Its Addresses, each valid on its own,
// may still be checked, so that a site reports all its problems at once.
func Parse(p *field.Path, raw map[string]any, bootMAC string) (*NetworkData, field.ErrorList) {
	r := &reader{}
	if inner, ok := raw["network"]; ok {
		// netplan's own files, and cloud-init's network config files,
		// wrap it in a network key.
		if len(raw) > 1 {
			return nil, field.ErrorList{field.Invalid(p, field.OmitValueType{},
				"network wraps the whole network configuration: move the other keys under it, or drop the network key")}
		}
		p = p.Child("network")
		m, ok := r.mapping(p, inner)
		if !ok {
			return nil, r.errs
		}
		raw = m
	}
	var nd *NetworkData
	switch {
	case raw["version"] != nil:
		nd = r.netplan(p, raw, bootMAC)
	case raw["links"] != nil || raw["networks"] != nil || raw["services"] != nil:
		nd = r.openStack(p, raw)
	default:
		r.errs = append(r.errs, field.Required(p,
			"give the host's network either as netplan (version: 2 with ethernets, bonds, vlans) or as OpenStack network_data.json (links, networks, services)"))
	}
	if nd != nil {
		nd.named = r.named
	}
	return nd, r.errs
}
