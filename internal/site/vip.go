package site

import (
	"fmt"
	"net/netip"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/bootstick/bootstick/internal/netdata"
)

// MinMastersForVIP is the number of masters from which a site that makes
// a new cluster must give cluster.controlPlaneVIP: etcd keeps its quorum
// with one of three masters gone, and the API must then answer at an
// address no one master owns.
const MinMastersForVIP = 3

// validateVIP checks cluster.controlPlaneVIP: an IPv4 address that
// keepalived can move between the masters, so on the one network every
// master's cluster address is in (VRRP announces it there), and that no
// one else uses. newCluster requires it of three masters.
func (s *Site) validateVIP(nets []*netdata.NetworkData, newCluster bool) field.ErrorList {
	p := field.NewPath("cluster", "controlPlaneVIP")
	masters := 0
	for _, h := range s.Hosts {
		if h.Role == RoleMaster {
			masters++
		}
	}
	v := s.Cluster.ControlPlaneVIP
	if v == "" {
		if newCluster && masters >= MinMastersForVIP {
			return field.ErrorList{field.Required(p, fmt.Sprintf("the site has %d masters: give the control plane a virtual IP (a free IPv4 address on the masters' network) so that the API outlives the first master", masters))}
		}
		return nil
	}
	vip, err := netip.ParseAddr(v)
	if err != nil || !vip.Is4() {
		return field.ErrorList{field.Invalid(p, v, "not an IPv4 address such as 172.22.0.5")}
	}
	var errs field.ErrorList
	b := s.Bootstrap
	if b.ownAddresses()[vip.String()] {
		errs = append(errs, field.Invalid(p, v, "is the bootstrap machine's own address: choose a free address on the masters' network"))
	}
	if start, err := netip.ParseAddr(b.Provisioning.DHCPRange.Start); err == nil {
		if end, err := netip.ParseAddr(b.Provisioning.DHCPRange.End); err == nil && !vip.Less(start) && !end.Less(vip) {
			errs = append(errs, field.Invalid(p, v, fmt.Sprintf("is inside bootstrap.provisioning.dhcpRange (%s-%s), which the bootstrap machine hands out: choose an address outside it", start, end)))
		}
	}
	prov, _ := netip.ParsePrefix(b.Provisioning.Address)
	// A network's own address and its broadcast address are no host's.
	edge := func(n netip.Prefix) bool {
		if !n.IsValid() || n.Bits() >= 31 {
			return false
		}
		last := n.Addr().As4()
		for i := n.Bits(); i < 32; i++ {
			last[i/8] |= 1 << (7 - i%8)
		}
		return vip == n.Addr() || vip == netip.AddrFrom4(last)
	}
	var off []string
	for i, h := range s.Hosts {
		var nd *netdata.NetworkData
		if i < len(nets) {
			nd = nets[i]
		}
		if nd != nil {
			for _, a := range nd.Addresses() {
				if a.Kind == netdata.Static && a.Addr == vip {
					errs = append(errs, field.Invalid(p, v, fmt.Sprintf("is host %s's own address (%s): choose a free address", h.Name, a.Path)))
				}
			}
		}
		if h.Role != RoleMaster {
			continue
		}
		// A master's network: that of its static cluster address, else
		// the provisioning network it takes a DHCP address on.
		net := prov.Masked()
		if nd != nil && nd.ClusterAddress(h.ClusterInterface) != "" {
			net = nd.ClusterNetwork(h.ClusterInterface)
		}
		switch {
		case !net.IsValid() || !net.Contains(vip):
			off = append(off, fmt.Sprintf("%s (%s)", h.Name, net))
		case edge(net):
			errs = append(errs, field.Invalid(p, v, fmt.Sprintf("is the network or broadcast address of %s, master %s's network: choose a host address there", net, h.Name)))
		}
	}
	if len(off) > 0 {
		errs = append(errs, field.Invalid(p, v, "is not on the network of master "+strings.Join(off, ", master ")+
			": keepalived moves the address between the masters on their one network; choose an address there"))
	}
	return errs
}
