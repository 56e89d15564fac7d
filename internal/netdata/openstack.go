package netdata

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// linkFields are the fields of each link type; Ironic's schema requires
// all but mtu and bond_miimon.
var linkFields = map[LinkType][]string{
	Phy:  {"id", "type", "ethernet_mac_address", "mtu"},
	Bond: {"id", "type", "ethernet_mac_address", "mtu", "bond_mode", "bond_links", "bond_miimon"},
	VLAN: {"id", "type", "vlan_mac_address", "vlan_link", "vlan_id", "mtu"},
}

var networkTypes = []string{string(IPv4), string(IPv4DHCP), string(IPv6), string(IPv6DHCP), string(IPv6SLAAC)}

// openStack reads network data in OpenStack's form as strictly as
// Ironic's schema, and more: every link a network, bond or VLAN names is
// there, ids are unique, a static network has its address and netmask.
func (r *reader) openStack(p *field.Path, raw map[string]any) *NetworkData {
	// (With a version, Parse took it for netplan's.)
	r.fields(p, raw, "OpenStack network data", nil, "links", "networks", "services")
	nd := &NetworkData{}
	links := map[string]int{}            // id: index in nd.Links
	linkPath := map[string]*field.Path{} // id: where it is
	phyMAC := map[string]*field.Path{}
	for i, item := range r.list(p.Child("links"), raw["links"]) {
		lp := p.Child("links").Index(i)
		if l, ok := r.osLink(lp, item); ok {
			if first, dup := linkPath[l.ID]; dup {
				r.add(field.Invalid(lp.Child("id"), l.ID, fmt.Sprintf("%s has this id too: give each link its own", first)))
				continue
			}
			if l.Type == Phy && l.EthernetMAC != "" {
				if first, dup := phyMAC[l.EthernetMAC]; dup {
					r.add(field.Invalid(lp.Child("ethernet_mac_address"), l.EthernetMAC, fmt.Sprintf("%s is this NIC already: list each NIC once", first)))
				}
				phyMAC[l.EthernetMAC] = lp
			}
			links[l.ID], linkPath[l.ID] = len(nd.Links), lp
			nd.Links = append(nd.Links, l)
		}
	}
	ids := make([]string, 0, len(links))
	for id := range links {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	known := "the ids of links: " + strings.Join(ids, ", ")
	if len(ids) == 0 {
		known = "a link under links"
	}
	memberOf := map[string]string{}
	for _, l := range nd.Links {
		lp := linkPath[l.ID]
		switch l.Type {
		case Bond:
			for j, m := range l.BondLinks {
				mp := lp.Child("bond_links").Index(j)
				k, ok := links[m]
				switch {
				case !ok:
					r.notFound(mp, m, "no link has this id: name "+known)
				case nd.Links[k].Type != Phy:
					r.add(field.Invalid(mp, m, "is a "+string(nd.Links[k].Type)+": a bond's members are phy links (NICs)"))
				case memberOf[m] != "":
					r.add(field.Invalid(mp, m, "is a member of bond "+memberOf[m]+" already: a NIC is in one bond"))
				default:
					memberOf[m] = l.ID
				}
			}
		case VLAN:
			k, ok := links[l.VLANLink]
			switch {
			case l.VLANLink == "":
			case !ok:
				r.notFound(lp.Child("vlan_link"), l.VLANLink, "no link has this id: name "+known)
			case nd.Links[k].Type == VLAN:
				r.add(field.Invalid(lp.Child("vlan_link"), l.VLANLink, "is a VLAN: put a VLAN on a phy link or a bond"))
			}
		}
	}
	vlans := map[string]*field.Path{}
	for _, l := range nd.Links {
		if l.Type == VLAN {
			key := fmt.Sprintf("%s/%d", l.VLANLink, l.VLANID)
			if first, dup := vlans[key]; dup {
				r.add(field.Invalid(linkPath[l.ID].Child("vlan_id"), l.VLANID, fmt.Sprintf("%s is this VLAN on %s already: list it once", first, l.VLANLink)))
			}
			vlans[key] = linkPath[l.ID]
			if b := memberOf[l.VLANLink]; b != "" {
				r.add(field.Invalid(linkPath[l.ID].Child("vlan_link"), l.VLANLink, "is a member of bond "+b+": put the VLAN on the bond"))
			}
		}
	}

	networks := map[string]*field.Path{}
	for i, item := range r.list(p.Child("networks"), raw["networks"]) {
		np := p.Child("networks").Index(i)
		n, ok := r.osNetwork(np, item)
		if !ok {
			continue
		}
		if first, dup := networks[n.ID]; dup {
			r.add(field.Invalid(np.Child("id"), n.ID, fmt.Sprintf("%s has this id too: give each network its own", first)))
		}
		networks[n.ID] = np
		if _, ok := links[n.Link]; !ok && n.Link != "" {
			r.notFound(np.Child("link"), n.Link, "no link has this id: name "+known)
		} else if b := memberOf[n.Link]; b != "" {
			r.add(field.Invalid(np.Child("link"), n.Link, "is a member of bond "+b+", which carries no network of its own: put the network on "+b))
		}
		nd.Networks = append(nd.Networks, n)
	}
	nd.Services = r.osServices(p.Child("services"), raw["services"])
	return nd
}

// osLink reads a link; false when it has no id or type to be known by
// (its problems are reported either way).
func (r *reader) osLink(p *field.Path, item any) (Link, bool) {
	m, ok := r.mapping(p, item)
	if !ok {
		return Link{}, false
	}
	var l Link
	l.ID, _ = r.str(p.Child("id"), m["id"], "the link an id, which networks name it by")
	r.checkLinkID(p.Child("id"), l.ID)
	t, _ := r.str(p.Child("type"), m["type"], "the link's type: phy (a NIC), bond or vlan")
	l.Type = LinkType(t)
	allowed, known := linkFields[l.Type]
	if !known {
		if t != "" {
			r.add(field.NotSupported(p.Child("type"), t, []string{string(Phy), string(Bond), string(VLAN)}))
		}
		return l, false
	}
	r.fields(p, m, "a "+t+" link", nil, allowed...)
	l.MTU = r.mtu(p.Child("mtu"), m["mtu"])
	switch l.Type {
	case Phy:
		l.EthernetMAC, _ = r.mac(p.Child("ethernet_mac_address"), m["ethernet_mac_address"])
	case Bond:
		l.EthernetMAC, _ = r.mac(p.Child("ethernet_mac_address"), m["ethernet_mac_address"])
		if mode, ok := r.str(p.Child("bond_mode"), m["bond_mode"], "the bonding mode: one of "+strings.Join(BondModes, ", ")); ok {
			if !slices.Contains(BondModes, mode) {
				r.add(field.NotSupported(p.Child("bond_mode"), mode, BondModes))
			}
			l.BondMode = mode
		}
		bp := p.Child("bond_links")
		members := r.list(bp, m["bond_links"])
		if _, isList := m["bond_links"].([]any); (isList || m["bond_links"] == nil) && len(members) == 0 {
			r.add(field.Required(bp, "list the ids of the bond's member NICs (phy links)"))
		}
		for j, v := range members {
			if id, ok := r.str(bp.Index(j), v, "a member NIC's link id"); ok {
				if slices.Contains(l.BondLinks, id) {
					r.add(field.Invalid(bp.Index(j), id, "is listed twice: list each member once"))
					continue
				}
				l.BondLinks = append(l.BondLinks, id)
			}
		}
		if v := m["bond_miimon"]; v != nil {
			l.BondMIIMon, _ = r.integer(p.Child("bond_miimon"), v, 0, maxInt)
		}
	case VLAN:
		l.VLANMAC, _ = r.mac(p.Child("vlan_mac_address"), m["vlan_mac_address"])
		l.VLANLink, _ = r.str(p.Child("vlan_link"), m["vlan_link"], "the id of the link the VLAN is on")
		if m["vlan_id"] == nil {
			r.add(field.Required(p.Child("vlan_id"), "give the VLAN's id, 1 to 4094"))
		} else {
			l.VLANID, _ = r.integer(p.Child("vlan_id"), m["vlan_id"], 1, 4094)
		}
	}
	return l, l.ID != ""
}

// maxInt bounds numbers that need no tighter bound (and fit any int).
const maxInt = 1<<31 - 1

// osNetwork reads a network; false when it has no id or type to be known
// by (its problems are reported either way).
func (r *reader) osNetwork(p *field.Path, item any) (Network, bool) {
	m, ok := r.mapping(p, item)
	if !ok {
		return Network{}, false
	}
	var n Network
	r.fields(p, m, "a network", map[string]string{
		"dns_nameservers": "give DNS servers as services: [{type: dns, address: ...}]",
		"dns_search":      searchDomains,
	}, "id", "type", "link", "network_id", "ip_address", "netmask", "routes", "services")
	n.ID, _ = r.str(p.Child("id"), m["id"], "the network an id")
	n.Link, _ = r.str(p.Child("link"), m["link"], "the id of the link the network is on")
	n.NetworkID, _ = r.str(p.Child("network_id"), m["network_id"], "the network's network_id (any name: Ironic requires one; its id will do)")
	t, ok := r.str(p.Child("type"), m["type"], "the network's type: "+strings.Join(networkTypes, ", "))
	n.Type = NetworkType(t)
	if ok && !slices.Contains(networkTypes, t) {
		r.add(field.NotSupported(p.Child("type"), t, networkTypes))
		return n, false
	}
	if !ok {
		return n, false
	}
	v6 := n.Type.V6()
	if !n.Type.Static() {
		for _, k := range []string{"ip_address", "netmask", "routes"} {
			if m[k] != nil {
				from := "DHCP"
				if n.Type == IPv6SLAAC {
					from = "router advertisements"
				}
				r.add(field.Forbidden(p.Child(k), fmt.Sprintf("an %s network takes its address and routes from %s: remove %s, or make the network %s with its address", t, from, k, map[bool]string{false: "ipv4", true: "ipv6"}[v6])))
			}
		}
		n.Services = r.osServices(p.Child("services"), m["services"])
		return n, n.ID != ""
	}
	ap, mp := p.Child("ip_address"), p.Child("netmask")
	if m["ip_address"] == nil {
		r.add(field.Required(ap, "a static network needs its address (or make it "+t+"_dhcp)"))
	}
	if m["netmask"] == nil {
		// cloud-init would take a /24 or /64, the deploy ramdisk a /32
		// or /128: say it once.
		r.add(field.Required(mp, "give the subnet's netmask, e.g. "+map[bool]string{false: "255.255.255.0", true: "ffff:ffff:ffff:ffff:: (a /64)"}[v6]))
	}
	var host netip.Prefix
	if m["ip_address"] != nil && m["netmask"] != nil {
		a, aok := r.ip(ap, m["ip_address"], v6)
		bits, mok := r.osNetmask(mp, m["netmask"], v6, false)
		if aok && mok {
			host = netip.PrefixFrom(a, bits)
			if r.hostAddr(ap, a.String(), host) {
				n.IPAddress, n.Netmask = a.String(), netmask(bits, v6)
				r.name(ap, Static, a)
			}
		}
	}
	for j, item := range r.list(p.Child("routes"), m["routes"]) {
		rp := p.Child("routes").Index(j)
		if rt, ok := r.osRoute(rp, item, v6, host); ok {
			n.Routes = append(n.Routes, rt)
		}
	}
	n.Services = r.osServices(p.Child("services"), m["services"])
	return n, n.ID != ""
}

// osNetmask reads a netmask of one family as a prefix length; route: a
// route's, which may be 0 (the default route).
func (r *reader) osNetmask(p *field.Path, v any, v6, route bool) (int, bool) {
	eg := map[bool]string{false: "255.255.255.0", true: "ffff:ffff:ffff:ffff:: (a /64)"}[v6]
	s, ok := r.str(p, v, "the netmask, e.g. "+eg)
	if !ok {
		return 0, false
	}
	bits := maskBits(s, v6)
	switch {
	case bits < 0:
		r.add(field.Invalid(p, s, "not a netmask such as "+eg))
	case !v6 && bits == 32:
		r.add(field.Invalid(p, s, "Ironic's schema takes no netmask 255.255.255.255: give the subnet's (255.255.255.254 or wider)"))
	case bits == 0 && !route:
		r.add(field.Invalid(p, s, "a netmask of no bits: give the subnet's, e.g. "+eg))
	default:
		return bits, true
	}
	return 0, false
}

func (r *reader) osRoute(p *field.Path, item any, v6 bool, host netip.Prefix) (Route, bool) {
	m, ok := r.mapping(p, item)
	if !ok {
		return Route{}, false
	}
	r.fields(p, m, "a route", map[string]string{
		"services": "give DNS servers in the top-level services: the deploy ramdisk reads only those",
	}, "network", "netmask", "gateway")
	errs := len(r.errs)
	dst, dok := r.ip(p.Child("network"), m["network"], v6)
	bits, mok := r.osNetmask(p.Child("netmask"), m["netmask"], v6, true)
	gw, gok := r.ip(p.Child("gateway"), m["gateway"], v6)
	if gok {
		r.name(p.Child("gateway"), Gateway, gw)
		if host.IsValid() {
			r.gatewayOn(p.Child("gateway"), gw, host)
		}
	}
	if dok && mok {
		if pr := netip.PrefixFrom(dst, bits); pr.Masked() != pr {
			r.add(field.Invalid(p.Child("network"), dst.String(), fmt.Sprintf("has host bits under its netmask: did you mean %s?", pr.Masked().Addr())))
		} else if bits == 0 {
			r.defaultRoute(p, v6)
		}
	}
	if len(r.errs) != errs {
		return Route{}, false
	}
	return Route{Network: dst.String(), Netmask: netmask(bits, v6), Gateway: gw.String()}, true
}

func (r *reader) osServices(p *field.Path, v any) []Service {
	var out []Service
	for i, item := range r.list(p, v) {
		sp := p.Index(i)
		m, ok := r.mapping(sp, item)
		if !ok {
			continue
		}
		r.fields(sp, m, "a service", nil, "type", "address")
		if t, ok := r.str(sp.Child("type"), m["type"], "the service's type: dns"); ok && t != DNS {
			r.add(field.NotSupported(sp.Child("type"), t, []string{DNS}))
			continue
		}
		if a, ok := r.anyIP(sp.Child("address"), m["address"]); ok {
			r.name(sp.Child("address"), Nameserver, a)
			out = append(out, Service{Type: DNS, Address: a.String()})
		}
	}
	return out
}

// searchDomains says why search domains are refused.
const searchDomains = "network_data.json carries no search domains (Ironic's schema and the deploy ramdisk know none): remove it, and set search domains in the OS image or in user data"
