package site

import (
	"fmt"
	"net/netip"
	"path"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/bootstick/bootstick/internal/firewall"
	"github.com/bootstick/bootstick/internal/netdata"
)

func (b *Bootstrap) validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	pp := p.Child("provisioning")
	prov := b.Provisioning
	errs = append(errs, validateIface(pp.Child("interface"), prov.Interface)...)
	prefix, perrs := hostPrefix(pp.Child("address"), prov.Address)
	errs = append(errs, perrs...)

	rp := pp.Child("dhcpRange")
	start, serr := parseAddr(rp.Child("start"), prov.DHCPRange.Start)
	end, eerr := parseAddr(rp.Child("end"), prov.DHCPRange.End)
	errs = append(errs, serr...)
	errs = append(errs, eerr...)
	if prefix.IsValid() {
		for _, e := range []struct {
			path  *field.Path
			value string
			addr  netip.Addr
		}{{rp.Child("start"), prov.DHCPRange.Start, start}, {rp.Child("end"), prov.DHCPRange.End, end}} {
			switch {
			case !e.addr.IsValid():
			case !prefix.Contains(e.addr):
				errs = append(errs, field.Invalid(e.path, e.value, "not inside the provisioning subnet "+prefix.Masked().String()))
			case reservedIn(prefix, e.addr) != "":
				errs = append(errs, field.Invalid(e.path, e.value, "is the subnet's "+reservedIn(prefix, e.addr)+" address, which no host can have: move the range inside"))
			}
		}
	}
	if start.IsValid() && end.IsValid() && start.BitLen() == end.BitLen() {
		if end.Less(start) {
			errs = append(errs, field.Invalid(rp.Child("end"), prov.DHCPRange.End, "comes before start "+prov.DHCPRange.Start))
		} else if a := prefix.Addr(); prefix.IsValid() && !a.Less(start) && !end.Less(a) {
			errs = append(errs, field.Invalid(rp, prov.DHCPRange.Start+"-"+prov.DHCPRange.End,
				fmt.Sprintf("covers the bootstrap address %s: start the range after it or end it before it", a)))
		}
	}

	if !contains(dhcpHostsModes, prov.DHCPHosts) {
		errs = append(errs, field.NotSupported(pp.Child("dhcpHosts"), prov.DHCPHosts, dhcpHostsModes))
	}
	seen := map[string]bool{}
	for i, name := range prov.Open {
		switch {
		case !contains(firewall.OptionalNames(), name):
			errs = append(errs, field.NotSupported(pp.Child("open").Index(i), name, firewall.OptionalNames()))
		case seen[name]:
			errs = append(errs, field.Duplicate(pp.Child("open").Index(i), name))
		}
		seen[name] = true
	}

	if ext := b.External; ext != nil {
		ep := p.Child("external")
		errs = append(errs, validateIface(ep.Child("interface"), ext.Interface)...)
		if ext.Interface != "" && ext.Interface == prov.Interface {
			errs = append(errs, field.Invalid(ep.Child("interface"), ext.Interface, "is the provisioning interface too: use another"))
		}
		eprefix, eerrs := hostPrefix(ep.Child("address"), ext.Address)
		errs = append(errs, eerrs...)
		if ext.Gateway != "" {
			gw, gerrs := parseAddr(ep.Child("gateway"), ext.Gateway)
			errs = append(errs, gerrs...)
			switch {
			case !gw.IsValid() || !eprefix.IsValid():
			case !eprefix.Contains(gw):
				errs = append(errs, field.Invalid(ep.Child("gateway"), ext.Gateway, "not inside the external subnet "+eprefix.Masked().String()))
			case gw == eprefix.Addr():
				errs = append(errs, field.Invalid(ep.Child("gateway"), ext.Gateway, "is this machine's own external address: give the router's"))
			case reservedIn(eprefix, gw) != "":
				errs = append(errs, field.Invalid(ep.Child("gateway"), ext.Gateway, "is the subnet's "+reservedIn(eprefix, gw)+" address: give the router's"))
			}
		}
		if eprefix.IsValid() && prefix.IsValid() && eprefix.Masked().Overlaps(prefix.Masked()) {
			errs = append(errs, field.Invalid(ep.Child("address"), ext.Address, "overlaps the provisioning subnet "+prefix.Masked().String()))
		}
	}

	dp := p.Child("dataDisk")
	switch {
	case b.DataDisk == "":
		errs = append(errs, field.Required(dp, "name the disk that keeps the cluster's state, e.g. /dev/disk/by-id/..."))
	case !strings.HasPrefix(b.DataDisk, "/dev/") || path.Clean(b.DataDisk) != b.DataDisk:
		errs = append(errs, field.Invalid(dp, b.DataDisk, "must be a device path under /dev/"))
	}
	for i, n := range b.NTP {
		if n == "" {
			errs = append(errs, field.Required(p.Child("ntp").Index(i), "an empty entry: fill it in or remove it"))
			continue
		}
		if _, err := netip.ParseAddr(n); err == nil {
			continue
		}
		if len(validation.IsDNS1123Subdomain(n)) > 0 {
			errs = append(errs, field.Invalid(p.Child("ntp").Index(i), n, "not an IP address or a DNS name"))
		}
	}
	for i, n := range b.DNS {
		if n == "" {
			errs = append(errs, field.Required(p.Child("dns").Index(i), "an empty entry: fill it in or remove it"))
			continue
		}
		if _, err := netip.ParseAddr(n); err != nil {
			errs = append(errs, field.Invalid(p.Child("dns").Index(i), n, "not an IP address"))
		}
	}
	if l := b.ProvisioningLimit; l < 0 || l > MaxProvisioningLimit {
		errs = append(errs, field.Invalid(p.Child("provisioningLimit"), l, fmt.Sprintf("give 1 to %d hosts at once, or leave it out for 20", MaxProvisioningLimit)))
	}
	return errs
}

// MaxProvisioningLimit bounds bootstrap.provisioningLimit: more hosts at
// once than one bootstrap machine serves.
const MaxProvisioningLimit = 100

func validateIface(p *field.Path, name string) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(p, "name the network interface, e.g. eno1")}
	}
	if !ifaceName.MatchString(name) {
		return field.ErrorList{field.Invalid(p, name, "not a network interface name (1-15 letters, digits, . _ - : @)")}
	}
	return nil
}

// hostPrefix parses an address with its prefix length, such as
// 172.22.0.1/24, that names a host inside its subnet.
func hostPrefix(p *field.Path, s string) (netip.Prefix, field.ErrorList) {
	if s == "" {
		return netip.Prefix{}, field.ErrorList{field.Required(p, "give the address with its prefix length, e.g. 172.22.0.1/24")}
	}
	pr, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, field.ErrorList{field.Invalid(p, s, "not an address with a prefix length, e.g. 172.22.0.1/24")}
	}
	if pr.Addr().Is4() && pr.Bits() < 31 {
		if pr.Addr() == pr.Masked().Addr() {
			return pr, field.ErrorList{field.Invalid(p, s, "is the subnet's network address: give the machine's own address")}
		}
		if pr.Addr() == netdata.LastAddr(pr) {
			return pr, field.ErrorList{field.Invalid(p, s, "is the subnet's broadcast address: give the machine's own address")}
		}
	}
	return pr, nil
}

// reservedIn names what a reserved address of an IPv4 subnet is
// ("network", "broadcast"), or "" for an address a host can have.
func reservedIn(pr netip.Prefix, a netip.Addr) string {
	if !a.Is4() || pr.Bits() >= 31 {
		return ""
	}
	switch a {
	case pr.Masked().Addr():
		return "network"
	case netdata.LastAddr(pr):
		return "broadcast"
	}
	return ""
}

func parseAddr(p *field.Path, s string) (netip.Addr, field.ErrorList) {
	if s == "" {
		return netip.Addr{}, field.ErrorList{field.Required(p, "give an IP address")}
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Addr{}, field.ErrorList{field.Invalid(p, s, "not an IP address")}
	}
	return a, nil
}

// ownAddresses are the bootstrap machine's own addresses.
func (b Bootstrap) ownAddresses() map[string]bool {
	out := map[string]bool{}
	for _, a := range []string{b.Provisioning.Address, externalAddress(b.External)} {
		if pr, err := netip.ParsePrefix(a); err == nil {
			out[pr.Addr().Unmap().String()] = true
		}
	}
	return out
}

func externalAddress(e *ExternalNetwork) string {
	if e == nil {
		return ""
	}
	return e.Address
}
