package site

import (
	"fmt"
	"net/netip"
	"net/url"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/bootstick/bootstick/internal/netdata"
)

// Each cluster's pod and service ranges. The application cluster's
// defaults stay clear of the appliance's: a host whose traffic to its own
// cluster's API service (the first service address) left by its default
// route before kube-proxy was up reached the appliance's API server
// instead, when both clusters used 10.96.0.0/12.
const (
	DefaultPodCIDR              = "10.128.0.0/16"
	DefaultServiceCIDR          = "10.112.0.0/12"
	DefaultBootstrapPodCIDR     = "10.244.0.0/16"
	DefaultBootstrapServiceCIDR = "10.96.0.0/12"
)

// cidr is one of the four cluster ranges.
type cidr struct {
	path   *field.Path
	value  string
	prefix netip.Prefix
	// bootstrap: the bootstrap machine's own cluster's range.
	bootstrap bool
}

// clusterRanges parses the appliance's and the application cluster's pod
// and service ranges, reporting any that is not a CIDR.
func (s *Site) clusterRanges() ([]cidr, field.ErrorList) {
	var out []cidr
	var errs field.ErrorList
	for _, n := range []struct {
		path      *field.Path
		value     string
		bootstrap bool
	}{
		{field.NewPath("bootstrap", "podCIDR"), s.Bootstrap.PodCIDR, true},
		{field.NewPath("bootstrap", "serviceCIDR"), s.Bootstrap.ServiceCIDR, true},
		{field.NewPath("cluster", "podCIDR"), s.Cluster.PodCIDR, false},
		{field.NewPath("cluster", "serviceCIDR"), s.Cluster.ServiceCIDR, false},
	} {
		pr, err := netip.ParsePrefix(n.value)
		switch {
		case err != nil:
			errs = append(errs, field.Invalid(n.path, n.value, "not a CIDR such as 10.244.0.0/16"))
		case pr.Masked() != pr:
			errs = append(errs, field.Invalid(n.path, n.value, "has host bits set: did you mean "+pr.Masked().String()+"?"))
		default:
			out = append(out, cidr{n.path, n.value, pr, n.bootstrap})
		}
	}
	return out, errs
}

// validateRanges: the four cluster ranges overlap neither each other nor
// any network or address the site names (the bootstrap machine's networks,
// its gateway, NTP and DNS servers, the addresses, gateways and DNS
// servers of the hosts' network data, nets by host; a BMC's address,
// which only the bootstrap machine reaches, only its own ranges): a
// packet to such an address would be taken for a pod's or a service's.
func (s *Site) validateRanges(nets []*netdata.NetworkData) field.ErrorList {
	ranges, errs := s.clusterRanges()
	for i := range ranges {
		for j := i + 1; j < len(ranges); j++ {
			if ranges[i].prefix.Overlaps(ranges[j].prefix) {
				errs = append(errs, field.Invalid(ranges[j].path, ranges[j].value,
					fmt.Sprintf("overlaps %s %s: give each cluster range a block of its own", ranges[i].path, ranges[i].prefix)))
			}
		}
	}
	inside := func(p *field.Path, value string, a netip.Addr, bootstrapOnly bool) {
		for _, r := range ranges {
			if bootstrapOnly && !r.bootstrap {
				continue
			}
			if r.prefix.Contains(a) {
				errs = append(errs, field.Invalid(p, value, fmt.Sprintf("is inside %s %s: traffic to it would go to a pod or a service; move %s", r.path, r.prefix, r.path)))
				return
			}
		}
	}
	network := func(p *field.Path, value string) {
		pr, err := netip.ParsePrefix(value)
		if err != nil {
			return
		}
		for _, r := range ranges {
			if r.prefix.Overlaps(pr.Masked()) {
				errs = append(errs, field.Invalid(r.path, r.value, fmt.Sprintf("overlaps the site's network %s (%s): move %s", pr.Masked(), p, r.path)))
			}
		}
	}
	addr := func(p *field.Path, value string) {
		if a, err := netip.ParseAddr(value); err == nil {
			inside(p, value, a.Unmap(), false)
		}
	}
	b := s.Bootstrap
	network(field.NewPath("bootstrap", "provisioning", "address"), b.Provisioning.Address)
	if b.External != nil {
		network(field.NewPath("bootstrap", "external", "address"), b.External.Address)
		addr(field.NewPath("bootstrap", "external", "gateway"), b.External.Gateway)
	}
	for i, n := range b.NTP {
		addr(field.NewPath("bootstrap", "ntp").Index(i), n)
	}
	for i, n := range b.DNS {
		addr(field.NewPath("bootstrap", "dns").Index(i), n)
	}
	for i, h := range s.Hosts {
		hp := field.NewPath("hosts").Index(i)
		// Only the bootstrap machine (Ironic) talks to the BMCs.
		if u, err := url.Parse(h.BMC.Address); err == nil {
			if a, err := netip.ParseAddr(u.Hostname()); err == nil {
				inside(hp.Child("bmc", "address"), u.Hostname(), a.Unmap(), true)
			}
		}
		if i < len(nets) && nets[i] != nil {
			for _, a := range nets[i].Addresses() {
				inside(a.Path, a.Addr.String(), a.Addr, false)
			}
		}
	}
	return errs
}
