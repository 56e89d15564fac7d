package netdata

import (
	"net"
	"net/netip"
	"slices"
	"strings"

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

// ClusterAddress is the node's IPv4 address in the application cluster
// (its pod and service ranges are IPv4): the static IPv4 address on link
// when the site names one (the host's clusterInterface), else the address
// of the static IPv4 network that carries the default route (Kubernetes
// picks a node's address from it), else the first static IPv4 address; ""
// when the host takes its IPv4 address by DHCP. The bootstrap machine
// reaches the host there over SSH, kubelet's node IP is it, and flannel
// uses the interface that holds it.
func (nd *NetworkData) ClusterAddress(link string) string {
	first := ""
	for _, n := range nd.Networks {
		if n.Type != IPv4 || (link != "" && n.Link != link) {
			continue
		}
		for _, rt := range n.Routes {
			if maskBits(rt.Netmask, false) == 0 {
				return n.IPAddress
			}
		}
		if first == "" {
			first = n.IPAddress
		}
	}
	return first
}

// ClusterNetwork is the network of ClusterAddress(link) (its address
// with the netmask, masked); not valid when the host takes its IPv4
// address by DHCP.
func (nd *NetworkData) ClusterNetwork(link string) netip.Prefix {
	a := nd.ClusterAddress(link)
	for _, n := range nd.Networks {
		if n.Type != IPv4 || n.IPAddress != a {
			continue
		}
		addr, err := netip.ParseAddr(a)
		bits := maskBits(n.Netmask, false)
		if err != nil || bits < 0 {
			continue
		}
		return netip.PrefixFrom(addr, bits).Masked()
	}
	return netip.Prefix{}
}

// CheckClusterLink reports why link cannot carry the host's address in the
// application cluster: it is not one of the links, or it has no static
// IPv4 address (the address must be known before the host boots).
func (nd *NetworkData) CheckClusterLink(p *field.Path, link string) *field.Error {
	var ids []string
	for _, l := range nd.Links {
		ids = append(ids, l.ID)
	}
	if !slices.Contains(ids, link) {
		return field.NotFound(p, link+" (the networkData's links are "+strings.Join(ids, ", ")+")")
	}
	if nd.ClusterAddress(link) == "" {
		return field.Invalid(p, link, "it has no static IPv4 address in networkData: the cluster's address must be known before the host boots; give it one, or leave clusterInterface out")
	}
	return nil
}
