package site

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

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
// requires (the node would never register), so the site does first.
func validateRamdiskNetworkData(p *field.Path, nd map[string]any) field.ErrorList {
	var errs field.ErrorList
	const why = "Ironic puts a virtual-media host's network data on its boot ISO only as valid network_data.json"
	for _, k := range []string{"links", "networks", "services"} {
		if _, ok := nd[k]; !ok {
			errs = append(errs, field.Required(p.Child(k), why+" (an empty list will do)"))
		}
	}
	each := func(key string, required func(m map[string]any) []string) {
		list, ok := nd[key].([]any)
		if !ok {
			if nd[key] != nil {
				errs = append(errs, field.Invalid(p.Child(key), field.OmitValueType{}, "must be a list"))
			}
			return
		}
		for i, item := range list {
			ip := p.Child(key).Index(i)
			m, ok := item.(map[string]any)
			if !ok {
				errs = append(errs, field.Invalid(ip, field.OmitValueType{}, "must be a mapping"))
				continue
			}
			for _, f := range required(m) {
				if _, ok := m[f]; !ok {
					errs = append(errs, field.Required(ip.Child(f), why))
				}
			}
			if key != "networks" {
				continue
			}
			routes, _ := m["routes"].([]any)
			for j, r := range routes {
				rm, ok := r.(map[string]any)
				if !ok {
					errs = append(errs, field.Invalid(ip.Child("routes").Index(j), field.OmitValueType{}, "must be a mapping"))
					continue
				}
				for _, f := range []string{"network", "netmask", "gateway"} {
					if _, ok := rm[f]; !ok {
						errs = append(errs, field.Required(ip.Child("routes").Index(j).Child(f), why))
					}
				}
			}
		}
	}
	// Every reference names a link, and a static network has its address:
	// the ramdisk configures the NICs from these.
	ids := map[string]bool{}
	links, _ := nd["links"].([]any)
	for _, l := range links {
		if m, ok := l.(map[string]any); ok {
			ids[fmt.Sprint(m["id"])] = true
		}
	}
	ref := func(p *field.Path, v any) {
		if v != nil && !ids[fmt.Sprint(v)] {
			errs = append(errs, field.NotFound(p, v))
		}
	}
	for i, l := range links {
		m, _ := l.(map[string]any)
		lp := p.Child("links").Index(i)
		ref(lp.Child("vlan_link"), m["vlan_link"])
		members, _ := m["bond_links"].([]any)
		for j, b := range members {
			ref(lp.Child("bond_links").Index(j), b)
		}
	}
	networks, _ := nd["networks"].([]any)
	for i, n := range networks {
		m, _ := n.(map[string]any)
		np := p.Child("networks").Index(i)
		ref(np.Child("link"), m["link"])
		if t := m["type"]; (t == "ipv4" || t == "ipv6") && m["ip_address"] == nil {
			errs = append(errs, field.Required(np.Child("ip_address"), "a static network needs its address (or make it ipv4_dhcp)"))
		}
	}
	each("links", func(m map[string]any) []string {
		if r, ok := l2Required[fmt.Sprint(m["type"])]; ok {
			return r
		}
		return l2Required[""]
	})
	each("networks", func(map[string]any) []string { return []string{"id", "type", "link", "network_id"} })
	each("services", func(map[string]any) []string { return []string{"type", "address"} })
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
	links, _ := nd["links"].([]any)
	for _, l := range links {
		m, _ := l.(map[string]any)
		if got, err := NormalizeMAC(fmt.Sprint(m["ethernet_mac_address"])); err == nil && got == want {
			ids[m["id"]] = true
		}
	}
	static := false
	networks, _ := nd["networks"].([]any)
	for _, n := range networks {
		m, _ := n.(map[string]any)
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
