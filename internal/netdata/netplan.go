package netdata

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// What netplan has and network_data.json cannot say, with what to do.
var netplanHints = map[string]string{
	"renderer":          "the OS image's cloud-init picks the renderer: remove it",
	"bridges":           "network_data.json has no bridges: remove them (configure them from user data once the host is up)",
	"wifis":             "a provisioned host's network is wired: remove wifis",
	"tunnels":           "network_data.json has no tunnels: remove them",
	"vrfs":              "network_data.json has no VRFs: remove them",
	"modems":            "network_data.json has no modems: remove them",
	"dummy-devices":     "network_data.json has no dummy devices: remove them",
	"virtual-ethernets": "network_data.json has no veth pairs: remove them",
	"nm-devices":        "network_data.json has no NetworkManager devices: remove them",
	"links":             "links is OpenStack's form, version netplan's: write the network data in one form (OpenStack's has no version)",
	"networks":          "networks is OpenStack's form, version netplan's: write the network data in one form (OpenStack's has no version)",
	"services":          "services is OpenStack's form, version netplan's: write the network data in one form (OpenStack's has no version)",
}

// What a device may have besides its own keys, with what to do about a
// few keys netplan has and network_data.json has not.
var (
	l3Keys     = []string{"dhcp4", "dhcp6", "addresses", "gateway4", "gateway6", "routes", "nameservers", "mtu"}
	deviceHint = map[string]string{
		"set-name":                "network_data.json cannot rename a NIC: remove set-name (the OS names it)",
		"optional":                "network_data.json has no optional links: remove it",
		"accept-ra":               "network_data.json cannot set router advertisements: remove accept-ra (dhcp6 accepts them)",
		"link-local":              "network_data.json cannot set link-local addressing: remove it",
		"routing-policy":          "network_data.json has no routing policy: remove it",
		"dhcp4-overrides":         "network_data.json has no DHCP overrides: remove them",
		"dhcp6-overrides":         "network_data.json has no DHCP overrides: remove them",
		"ipv6-privacy":            "network_data.json cannot set IPv6 privacy addresses: remove it",
		"wakeonlan":               "network_data.json cannot set wake-on-LAN: remove it",
		"critical":                "network_data.json cannot mark a link critical: remove it",
		"ipv6-mtu":                "network_data.json has one MTU per link: use mtu",
		"ipv6-address-generation": "network_data.json cannot choose how IPv6 addresses are made: remove it",
	}
)

// device is one netplan device as the converter reads it.
type device struct {
	name string
	p    *field.Path
	m    map[string]any
	mac  string
	kind LinkType
	// bond is the bond a NIC is a member of.
	bond string
}

// netplan converts netplan's version 2 (ethernets, bonds, vlans) to
// OpenStack's form: each device a link named as in netplan, each address
// or DHCP a network on it, DNS servers the host's services.
func (r *reader) netplan(p *field.Path, raw map[string]any, bootMAC string) *NetworkData {
	vp := p.Child("version")
	switch v := raw["version"]; v {
	case 2, int64(2), uint64(2), float64(2):
	case 1, int64(1), uint64(1), float64(1):
		r.add(field.Invalid(vp, shown(v), "cloud-init's version 1 network config is not converted: write it as version 2 (netplan: ethernets, bonds, vlans) or as OpenStack network_data.json"))
		return nil
	default:
		r.add(field.Invalid(vp, shown(v), "netplan's version is the number 2: set version: 2"))
		return nil
	}
	r.fields(p, raw, "netplan network config", netplanHints, "version", "ethernets", "bonds", "vlans")

	devs := map[string]*device{}
	read := func(section string, kind LinkType) []*device {
		sp := p.Child(section)
		v := raw[section]
		if v == nil {
			return nil
		}
		m, ok := r.mapping(sp, v)
		if !ok {
			return nil
		}
		names := make([]string, 0, len(m))
		for n := range m {
			names = append(names, n)
		}
		slices.Sort(names)
		var out []*device
		for _, n := range names {
			dp := sp.Child(n)
			if n == "" {
				r.add(field.Required(dp, "give the device a name"))
				continue
			}
			if !r.checkLinkID(dp, n) {
				continue
			}
			if first, dup := devs[n]; dup {
				r.add(field.Invalid(dp, n, fmt.Sprintf("%s has this name too: give each device its own", first.p)))
				continue
			}
			dm, ok := r.mapping(dp, m[n])
			if !ok {
				continue
			}
			d := &device{name: n, p: dp, m: dm, kind: kind}
			devs[n] = d
			out = append(out, d)
		}
		return out
	}
	eths, bonds, vlans := read("ethernets", Phy), read("bonds", Bond), read("vlans", VLAN)
	order := slices.Concat(eths, bonds, vlans)

	nd := &NetworkData{}
	macs := map[string]*field.Path{}
	for _, d := range eths {
		r.fields(d.p, d.m, "an ethernet", withHint(deviceHint, "macaddress",
			"network_data.json names a NIC by its MAC and cannot change it: to name the NIC, use match: {macaddress: ...}"),
			append([]string{"match"}, l3Keys...)...)
		d.mac = r.match(d.p.Child("match"), d.m["match"], bootMAC)
		if d.mac != "" {
			if first, dup := macs[d.mac]; dup {
				r.add(field.Invalid(d.p.Child("match", "macaddress"), d.mac, fmt.Sprintf("%s is this NIC already: list each NIC once", first)))
			}
			macs[d.mac] = d.p.Child("match", "macaddress")
		}
		nd.Links = append(nd.Links, Link{ID: d.name, Type: Phy, EthernetMAC: d.mac, MTU: r.mtu(d.p.Child("mtu"), d.m["mtu"])})
	}
	for _, d := range bonds {
		r.fields(d.p, d.m, "a bond", deviceHint, append([]string{"interfaces", "parameters", "macaddress"}, l3Keys...)...)
		l := Link{ID: d.name, Type: Bond, MTU: r.mtu(d.p.Child("mtu"), d.m["mtu"])}
		ip := d.p.Child("interfaces")
		members := r.list(ip, d.m["interfaces"])
		if _, isList := d.m["interfaces"].([]any); (isList || d.m["interfaces"] == nil) && len(members) == 0 {
			r.add(field.Required(ip, "list the bond's member NICs by their names under ethernets"))
		}
		for j, v := range members {
			mp := ip.Index(j)
			name, ok := r.str(mp, v, "a member NIC's name under ethernets")
			if !ok {
				continue
			}
			member := devs[name]
			switch {
			case member == nil:
				r.notFound(mp, name, "a bond's members are NICs: name one under ethernets")
			case member.kind != Phy:
				r.add(field.Invalid(mp, name, "is a "+string(member.kind)+": a bond's members are NICs under ethernets"))
			case member.bond == d.name:
				r.add(field.Invalid(mp, name, "is listed twice: list each member once"))
			case member.bond != "":
				r.add(field.Invalid(mp, name, "is a member of bond "+member.bond+" already: a NIC is in one bond"))
			default:
				member.bond = d.name
				l.BondLinks = append(l.BondLinks, name)
				if d.mac == "" {
					d.mac = member.mac // the first member's, as the kernel's bond takes it
				}
			}
		}
		if v := d.m["macaddress"]; v != nil {
			d.mac, _ = r.mac(d.p.Child("macaddress"), v)
		}
		l.EthernetMAC = d.mac
		pp := d.p.Child("parameters")
		params := map[string]any{}
		if v := d.m["parameters"]; v != nil {
			params, _ = r.mapping(pp, v)
		}
		r.fields(pp, params, "a bond's parameters", nil, "mode", "mii-monitor-interval")
		if params["mode"] == nil {
			// The kernel and the deploy ramdisk default differently.
			r.add(field.Required(pp.Child("mode"), "give the bonding mode: one of "+strings.Join(BondModes, ", ")))
		} else if mode, ok := r.str(pp.Child("mode"), params["mode"], "the bonding mode"); ok {
			if !slices.Contains(BondModes, mode) {
				r.add(field.NotSupported(pp.Child("mode"), mode, BondModes))
			}
			l.BondMode = mode
		}
		if v := params["mii-monitor-interval"]; v != nil {
			// netplan reads a bare number as milliseconds, as bond_miimon is.
			l.BondMIIMon, _ = r.integer(pp.Child("mii-monitor-interval"), v, 0, maxInt)
		}
		nd.Links = append(nd.Links, l)
	}
	vlanIDs := map[string]*field.Path{}
	for _, d := range vlans {
		r.fields(d.p, d.m, "a VLAN", deviceHint, append([]string{"id", "link", "macaddress"}, l3Keys...)...)
		l := Link{ID: d.name, Type: VLAN, MTU: r.mtu(d.p.Child("mtu"), d.m["mtu"])}
		if d.m["id"] == nil {
			r.add(field.Required(d.p.Child("id"), "give the VLAN's id, 1 to 4094"))
		} else {
			l.VLANID, _ = r.integer(d.p.Child("id"), d.m["id"], 1, 4094)
		}
		if parent, ok := r.str(d.p.Child("link"), d.m["link"], "the name of the ethernet or bond the VLAN is on"); ok {
			switch pd := devs[parent]; {
			case pd == nil:
				r.notFound(d.p.Child("link"), parent, "name the ethernet or bond the VLAN is on")
			case pd.kind == VLAN:
				r.add(field.Invalid(d.p.Child("link"), parent, "is a VLAN: put a VLAN on an ethernet or a bond"))
			case pd.bond != "":
				r.add(field.Invalid(d.p.Child("link"), parent, "is a member of bond "+pd.bond+": put the VLAN on the bond"))
			default:
				l.VLANLink, d.mac = parent, pd.mac
				key := fmt.Sprintf("%s/%d", parent, l.VLANID)
				if first, dup := vlanIDs[key]; dup && l.VLANID != 0 {
					r.add(field.Invalid(d.p.Child("id"), l.VLANID, fmt.Sprintf("%s is this VLAN on %s already: list it once", first, parent)))
				}
				vlanIDs[key] = d.p
			}
		}
		if v := d.m["macaddress"]; v != nil {
			d.mac, _ = r.mac(d.p.Child("macaddress"), v)
		}
		l.VLANMAC = d.mac
		nd.Links = append(nd.Links, l)
	}

	dns := map[string]bool{}
	for _, d := range order {
		nets := r.l3(d)
		nd.Networks = append(nd.Networks, nets...)
		np := d.p.Child("nameservers")
		ns := map[string]any{}
		if v := d.m["nameservers"]; v != nil {
			ns, _ = r.mapping(np, v)
		}
		r.fields(np, ns, "nameservers", map[string]string{"search": searchDomains}, "addresses")
		for j, v := range r.list(np.Child("addresses"), ns["addresses"]) {
			if a, ok := r.anyIP(np.Child("addresses").Index(j), v); ok {
				r.name(np.Child("addresses").Index(j), Nameserver, a)
				if !dns[a.String()] {
					dns[a.String()] = true
					nd.Services = append(nd.Services, Service{Type: DNS, Address: a.String()})
				}
			}
		}
	}
	return nd
}

func withHint(hints map[string]string, key, hint string) map[string]string {
	out := map[string]string{key: hint}
	for k, v := range hints {
		out[k] = v
	}
	return out
}

// match reads an ethernet's match, which must name the NIC by its MAC:
// network_data.json knows NICs by MAC only.
func (r *reader) match(p *field.Path, v any, bootMAC string) string {
	eg := "52:54:00:12:34:56"
	if hw, err := net.ParseMAC(bootMAC); err == nil {
		eg = hw.String()
	}
	if v == nil {
		r.add(field.Required(p, fmt.Sprintf(
			"network_data.json names NICs by MAC: add match: {macaddress: %q} (the boot NIC's MAC, if this is that NIC; else this NIC's own)", eg)))
		return ""
	}
	m, ok := r.mapping(p, v)
	if !ok {
		return ""
	}
	r.fields(p, m, "match", map[string]string{
		"name":   "network_data.json names NICs by MAC, not by name: match by macaddress only",
		"driver": "network_data.json names NICs by MAC, not by driver: match by macaddress only",
	}, "macaddress")
	if m["macaddress"] == nil {
		r.add(field.Required(p.Child("macaddress"), fmt.Sprintf("network_data.json names NICs by MAC: give the NIC's, e.g. %q", eg)))
		return ""
	}
	mac, _ := r.mac(p.Child("macaddress"), m["macaddress"])
	return mac
}

// l3 converts a device's DHCP, addresses, gateways and routes to networks
// on its link.
func (r *reader) l3(d *device) []Network {
	if d.bond != "" {
		for _, k := range l3Keys {
			if k != "mtu" && d.m[k] != nil {
				r.add(field.Forbidden(d.p.Child(k), "a bond member carries no network of its own: put it on bond "+d.bond))
			}
		}
		return nil
	}
	var out []Network
	for _, dh := range []struct {
		key string
		typ NetworkType
	}{{"dhcp4", IPv4DHCP}, {"dhcp6", IPv6DHCP}} {
		if r.boolean(d.p.Child(dh.key), d.m[dh.key]) {
			id := d.name + "-" + dh.key
			out = append(out, Network{ID: id, Type: dh.typ, Link: d.name, NetworkID: id})
		}
	}
	// static are the indexes in out of the static networks, with their
	// addresses' prefixes.
	type static struct {
		i    int
		host netip.Prefix
	}
	var statics []static
	ap := d.p.Child("addresses")
	for j, v := range r.list(ap, d.m["addresses"]) {
		p := ap.Index(j)
		s, ok := r.str(p, v, "an address with its prefix length, e.g. 10.0.0.5/24")
		if !ok {
			continue
		}
		pr, err := netip.ParsePrefix(s)
		if err != nil || pr.Addr().Zone() != "" || pr.Addr().Is4In6() {
			if _, aerr := netip.ParseAddr(s); aerr == nil {
				r.add(field.Invalid(p, s, "has no prefix length: give it, e.g. "+s+"/24"))
			} else {
				r.add(field.Invalid(p, s, "not an address with its prefix length, e.g. 10.0.0.5/24"))
			}
			continue
		}
		if !r.hostAddr(p, s, pr) {
			continue
		}
		r.name(p, Static, pr.Addr())
		v6 := pr.Addr().Is6()
		typ, family := IPv4, "ipv4"
		if v6 {
			typ, family = IPv6, "ipv6"
		}
		id := fmt.Sprintf("%s-%s-%d", d.name, family, j)
		statics = append(statics, static{len(out), pr})
		out = append(out, Network{ID: id, Type: typ, Link: d.name, NetworkID: id,
			IPAddress: pr.Addr().String(), Netmask: netmask(pr.Bits(), v6)})
	}

	// route puts a route on the static network whose subnet holds its
	// gateway (an IPv6 link-local gateway: the first IPv6 one).
	route := func(p, gwp *field.Path, to netip.Prefix, gw netip.Addr) {
		v6 := gw.Is6()
		var on *static
		for k := range statics {
			s := &statics[k]
			if s.host.Addr().Is6() != v6 {
				continue
			}
			if s.host.Contains(gw) || v6 && gw.IsLinkLocalUnicast() {
				on = s
				break
			}
			if on == nil {
				on = s
			}
		}
		family := map[bool]string{false: "IPv4", true: "IPv6"}[v6]
		if on == nil {
			r.add(field.Invalid(gwp, gw.String(), fmt.Sprintf("%s has no static %s address to reach it from: add one under addresses (with DHCP, the DHCP server gives the routes)", d.name, family)))
			return
		}
		if !r.gatewayOn(gwp, gw, on.host) {
			return
		}
		if to.Bits() == 0 {
			r.defaultRoute(p, v6)
		}
		n := &out[on.i]
		n.Routes = append(n.Routes, Route{Network: to.Addr().String(), Netmask: netmask(to.Bits(), v6), Gateway: gw.String()})
	}
	for _, g := range []struct {
		key string
		v6  bool
	}{{"gateway4", false}, {"gateway6", true}} {
		if v := d.m[g.key]; v != nil {
			gp := d.p.Child(g.key)
			if gw, ok := r.ip(gp, v, g.v6); ok {
				r.name(gp, Gateway, gw)
				route(gp, gp, defaultDst(g.v6), gw)
			}
		}
	}
	rp := d.p.Child("routes")
	for j, v := range r.list(rp, d.m["routes"]) {
		p := rp.Index(j)
		m, ok := r.mapping(p, v)
		if !ok {
			continue
		}
		r.fields(p, m, "a route", map[string]string{
			"metric":  "network_data.json has no route metrics: remove it (a host has one default route of each family)",
			"on-link": "network_data.json has no on-link routes: give a gateway inside the device's subnet",
			"table":   "network_data.json has no routing tables: remove it",
			"from":    "network_data.json has no source routes: remove it",
			"scope":   "network_data.json has no route scopes: remove it",
			"type":    "network_data.json has unicast routes only: remove it",
		}, "to", "via")
		gw, gok := r.anyIP(p.Child("via"), m["via"])
		to, ok := r.str(p.Child("to"), m["to"], "the destination: default, or a network such as 10.1.0.0/16")
		if gok {
			r.name(p.Child("via"), Gateway, gw)
		}
		if !ok || !gok {
			continue
		}
		var dst netip.Prefix
		switch to {
		case "default":
			dst = defaultDst(gw.Is6())
		default:
			pr, err := netip.ParsePrefix(to)
			switch {
			case err != nil || pr.Addr().Zone() != "" || pr.Addr().Is4In6():
				r.add(field.Invalid(p.Child("to"), to, "not default or a network such as 10.1.0.0/16"))
				continue
			case pr.Masked() != pr:
				r.add(field.Invalid(p.Child("to"), to, "has host bits: did you mean "+pr.Masked().String()+"?"))
				continue
			case pr.Addr().Is6() != gw.Is6():
				r.add(field.Invalid(p.Child("via"), gw.String(), "is not of the destination's family: give a router of "+to+"'s"))
				continue
			case pr.Addr().Is4() && pr.Bits() == 32:
				r.add(field.Invalid(p.Child("to"), to, "Ironic's schema takes no /32 route (netmask 255.255.255.255): route the subnet it is in"))
				continue
			}
			dst = pr
		}
		route(p, p.Child("via"), dst, gw)
	}
	return out
}

// defaultDst is the default route's destination of a family.
func defaultDst(v6 bool) netip.Prefix {
	if v6 {
		return netip.PrefixFrom(netip.IPv6Unspecified(), 0)
	}
	return netip.PrefixFrom(netip.IPv4Unspecified(), 0)
}
