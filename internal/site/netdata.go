package site

import (
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/bootstick/bootstick/internal/netdata"
)

// Network is the host's network data as one model, converted to OpenStack's
// network_data.json when the site gives netplan's form; nil when the site
// gives none. A loaded site's hosts have valid network data.
func (h *Host) Network() (*netdata.NetworkData, error) {
	if h.NetworkData == nil {
		return nil, nil
	}
	nd, errs := netdata.Parse(field.NewPath("networkData"), h.NetworkData, h.BootMACAddress)
	if len(errs) > 0 {
		// Each problem names its field; the caller names the host.
		return nil, errs.ToAggregate()
	}
	return nd, nil
}

// hostNetworks parses every host's network data, by host index (nil where
// a host gives none), reporting its problems. Network data with problems
// is there too, for the range checks of its addresses: all problems are
// reported at once.
func (s *Site) hostNetworks() ([]*netdata.NetworkData, field.ErrorList) {
	var errs field.ErrorList
	out := make([]*netdata.NetworkData, len(s.Hosts))
	for i, h := range s.Hosts {
		if h.NetworkData == nil {
			continue
		}
		nd, nerrs := netdata.Parse(field.NewPath("hosts").Index(i).Child("networkData"), h.NetworkData, h.BootMACAddress)
		errs = append(errs, nerrs...)
		out[i] = nd
	}
	for i, h := range s.Hosts {
		p := field.NewPath("hosts").Index(i).Child("clusterInterface")
		switch {
		case h.ClusterInterface == "":
		case out[i] == nil:
			errs = append(errs, field.Invalid(p, h.ClusterInterface, "the host has no networkData: give it networkData with a static IPv4 address on that link, or leave clusterInterface out"))
		default:
			if err := out[i].CheckClusterLink(p, h.ClusterInterface); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return out, errs
}
