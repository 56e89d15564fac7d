package site

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Network data is free-form YAML (map[string]any); these read one level
// of it, giving the zero value for anything else.
func list(v any) []any          { l, _ := v.([]any); return l }
func dict(v any) map[string]any { m, _ := v.(map[string]any); return m }
func str(v any) string          { s, _ := v.(string); return s }

// openStackNetworkData says whether network data is OpenStack's
// network_data.json (links, networks) rather than cloud-init's v2.
func openStackNetworkData(nd map[string]any) bool {
	return nd["links"] != nil || nd["networks"] != nil
}

// l2Required are the fields Ironic's network_data.json schema requires of
// a link, by its type (every other type is a plain NIC, as phy).
var l2Required = map[string][]string{
	"bond": {"id", "type", "ethernet_mac_address", "bond_mode", "bond_links"},
	"vlan": {"id", "type", "vlan_mac_address", "vlan_link", "vlan_id"},
	"":     {"id", "type", "ethernet_mac_address"},
}

// validateRamdiskNetworkData checks the network data of a host booted by
// virtual media, which Ironic puts on the host's boot ISO for its deploy
// ramdisk: Ironic refuses network_data.json that lacks a field its schema
// requires (the node would never register), so the site does first; and
// every link a network, VLAN or bond names must be there, and a static
// network must have its address, for the ramdisk to configure the NICs.
func validateRamdiskNetworkData(p *field.Path, nd map[string]any) field.ErrorList {
	var errs field.ErrorList
	const why = "Ironic puts a virtual-media host's network data on its boot ISO only as valid network_data.json"
	for _, k := range []string{"links", "networks", "services"} {
		if nd[k] == nil {
			errs = append(errs, field.Required(p.Child(k), why+" (an empty list will do)"))
		}
	}
	ids := map[string]bool{}
	for _, l := range list(nd["links"]) {
		if m := dict(l); m != nil {
			ids[fmt.Sprint(m["id"])] = true
		}
	}
	ref := func(p *field.Path, v any) {
		if v != nil && !ids[fmt.Sprint(v)] {
			errs = append(errs, field.NotFound(p, v))
		}
	}
	need := func(p *field.Path, m map[string]any, fields ...string) {
		for _, f := range fields {
			if _, ok := m[f]; !ok {
				errs = append(errs, field.Required(p.Child(f), why))
			}
		}
	}
	// each visits the mappings of the list at key.
	each := func(key string, visit func(p *field.Path, m map[string]any)) {
		if nd[key] != nil && list(nd[key]) == nil {
			errs = append(errs, field.Invalid(p.Child(key), field.OmitValueType{}, "must be a list"))
			return
		}
		for i, item := range list(nd[key]) {
			ip := p.Child(key).Index(i)
			if m := dict(item); m != nil {
				visit(ip, m)
			} else {
				errs = append(errs, field.Invalid(ip, field.OmitValueType{}, "must be a mapping"))
			}
		}
	}
	each("links", func(lp *field.Path, m map[string]any) {
		required, ok := l2Required[fmt.Sprint(m["type"])]
		if !ok {
			required = l2Required[""]
		}
		need(lp, m, required...)
		ref(lp.Child("vlan_link"), m["vlan_link"])
		for j, b := range list(m["bond_links"]) {
			ref(lp.Child("bond_links").Index(j), b)
		}
	})
	each("networks", func(np *field.Path, m map[string]any) {
		need(np, m, "id", "type", "link", "network_id")
		ref(np.Child("link"), m["link"])
		if t := m["type"]; (t == "ipv4" || t == "ipv6") && m["ip_address"] == nil {
			errs = append(errs, field.Required(np.Child("ip_address"), "a static network needs its address (or make it ipv4_dhcp)"))
		}
		for j, r := range list(m["routes"]) {
			rp := np.Child("routes").Index(j)
			if rm := dict(r); rm != nil {
				need(rp, rm, "network", "netmask", "gateway")
			} else {
				errs = append(errs, field.Invalid(rp, field.OmitValueType{}, "must be a mapping"))
			}
		}
	})
	each("services", func(sp *field.Path, m map[string]any) { need(sp, m, "type", "address") })
	return errs
}

// staticOn says whether network data gives the NIC with this MAC a static
// address (an ipv4 or ipv6 network on its link) and asks for no DHCP on
// it: only then may DHCP ignore the NIC.
func staticOn(nd map[string]any, mac string) bool {
	want, err := NormalizeMAC(mac)
	if err != nil {
		return false
	}
	ids := map[any]bool{}
	for _, l := range list(nd["links"]) {
		m := dict(l)
		if got, err := NormalizeMAC(fmt.Sprint(m["ethernet_mac_address"])); err == nil && got == want {
			ids[m["id"]] = true
		}
	}
	static := false
	for _, n := range list(nd["networks"]) {
		m := dict(n)
		if !ids[m["link"]] {
			continue
		}
		switch m["type"] {
		case "ipv4", "ipv6":
			static = true
		case "ipv4_dhcp", "ipv6_dhcp":
			return false
		}
	}
	return static
}
