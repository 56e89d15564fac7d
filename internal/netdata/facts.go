package netdata

import (
	"net"
	"net/netip"
	"slices"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Kind says what an address is to the host.
type Kind string

// The kinds of address network data names.
const (
	// Static is one of the host's own addresses.
	Static Kind = "address"
	// Gateway is a router the host's routes go through.
	Gateway Kind = "gateway"
	// Nameserver is a DNS server.
	Nameserver Kind = "nameserver"
)

// Address is an address the network data names, with where the site
// file names it.
type Address struct {
	Path *field.Path
	Kind Kind
	Addr netip.Addr
}

// Addresses are every address the site file's network data names (the
// host's own, gateways, DNS servers), each with its field path, in the
// order it names them. Only network data from Parse has them.
func (nd *NetworkData) Addresses() []Address { return slices.Clone(nd.named) }

// StaticAddresses are the host's own addresses, with their field paths.
func (nd *NetworkData) StaticAddresses() []Address {
	var out []Address
	for _, a := range nd.named {
		if a.Kind == Static {
			out = append(out, a)
		}
	}
	return out
}

// StaticOn says whether the NIC with this MAC has a static address and
// asks for no DHCP: a network of type ipv4 or ipv6, and none of type
// ipv4_dhcp or ipv6_dhcp, on the untagged links that send with that MAC
// (the NIC itself, or a bond that has its MAC). Only then may the
// provisioning network's DHCP server ignore the MAC.
func (nd *NetworkData) StaticOn(mac string) bool {
	hw, err := net.ParseMAC(mac)
	if err != nil {
		return false
	}
	want := hw.String()
	on := map[string]bool{}
	for _, l := range nd.Links {
		if l.Type != VLAN && l.EthernetMAC == want {
			on[l.ID] = true
		}
	}
	static := false
	for _, n := range nd.Networks {
		switch {
		case !on[n.Link]:
		case n.Type.DHCP():
			return false
		case n.Type.Static():
			static = true
		}
	}
	return static
}

// defaultRoute is the network carrying the default route, IPv4's first,
// and that route's gateway; nil when there is none.
func (nd *NetworkData) defaultRoute() (*Network, string) {
	for _, v6 := range []bool{false, true} {
		for i := range nd.Networks {
			n := &nd.Networks[i]
			if !n.Type.Static() || n.Type.V6() != v6 {
				continue
			}
			for _, rt := range n.Routes {
				if maskBits(rt.Netmask, v6) == 0 {
					return n, rt.Gateway
				}
			}
		}
	}
	return nil, ""
}

// ClusterAddress is the node's address in the application cluster: the
// address of the network that carries the default route (Kubernetes picks
// a node's address from it), else the first static IPv4 address; "" when
// the host takes its addresses by DHCP.
func (nd *NetworkData) ClusterAddress() string {
	if n, _ := nd.defaultRoute(); n != nil {
		return n.IPAddress
	}
	for _, n := range nd.Networks {
		if n.Type == IPv4 {
			return n.IPAddress
		}
	}
	return ""
}

// DefaultGateway is the gateway of the host's default route (IPv4's when
// it has both), or "" when it has none (DHCP may give one).
func (nd *NetworkData) DefaultGateway() string {
	_, gw := nd.defaultRoute()
	return gw
}

// DNSServers are the DNS servers the network data gives: the host's, then
// each network's, each once.
func (nd *NetworkData) DNSServers() []string {
	var out []string
	add := func(ss []Service) {
		for _, s := range ss {
			if s.Type == DNS && !slices.Contains(out, s.Address) {
				out = append(out, s.Address)
			}
		}
	}
	add(nd.Services)
	for _, n := range nd.Networks {
		add(n.Services)
	}
	return out
}
