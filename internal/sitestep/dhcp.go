package sitestep

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/bootstick/bootstick/internal/dhcphosts"
	"github.com/bootstick/bootstick/internal/kube"
	"github.com/bootstick/bootstick/internal/logctx"
	"github.com/bootstick/bootstick/internal/render"
	"github.com/bootstick/bootstick/internal/site"
)

// WriteDHCPHosts writes the provisioning network's DHCP host list
// (package dhcphosts) into dir for the site e: the boot NICs of its hosts
// (site.Early.DHCPHosts), answered but for a virtual-media host with a
// static address; and, answered too, the boot NICs of the hosts the site
// no longer names whose BareMetalHosts the site step made and are still
// there (Leaving): the baremetal-operator deprovisions such a host by
// booting it into the deploy ramdisk, which asks for an address. Every
// other MAC the list named before is refused from then on, or answered
// with bootstrap.provisioning.dhcpHosts any. Ironic's dnsmasq reads each
// changed line at once. It logs each change, by host name where one is
// known.
func WriteDHCPHosts(ctx context.Context, c *kube.Client, dir string, e *site.Early) error {
	keep := make([]string, 0, len(e.Hosts))
	names := map[string]string{}
	var hosts []dhcphosts.Host
	for _, h := range e.DHCPHosts() {
		keep = append(keep, h.Name)
		names[h.MAC] = h.Name
		hosts = append(hosts, dhcphosts.Host{MAC: h.MAC, Answer: h.Answer})
	}
	leaving, err := Leaving(ctx, c, e.Cluster.Name, keep)
	if err != nil {
		return err
	}
	for _, l := range leaving {
		if _, ok := names[l.MAC]; ok {
			continue // a host of the site has its MAC now
		}
		names[l.MAC] = l.Host + " (being deprovisioned)"
		hosts = append(hosts, dhcphosts.Host{MAC: l.MAC, Answer: true})
	}
	changed, err := dhcphosts.Write(dir, hosts, e.Bootstrap.Provisioning.DHCPHostsMode() == site.DHCPHostsAny)
	if err != nil {
		return err
	}
	logDHCPChanges(ctx, changed, names)
	return nil
}

// logDHCPChanges says what DHCP answers and refuses from now on.
func logDHCPChanges(ctx context.Context, changed []dhcphosts.Host, names map[string]string) {
	log := logctx.From(ctx)
	for _, h := range changed {
		who := names[h.MAC]
		if who == "" {
			who = "no host of the site"
		}
		if h.Answer {
			log.Info("DHCP answers "+h.MAC, "host", who)
		} else {
			log.Info("DHCP refuses "+h.MAC, "host", who)
		}
	}
}

// LeavingHost is a host the site no longer names whose BareMetalHost is
// still there.
type LeavingHost struct {
	Host string
	// MAC is its boot MAC, as site.NormalizeMAC gives it.
	MAC string
}

// Leaving are the hosts of the BareMetalHosts the site step made for the
// cluster's hosts that keep (the site's hosts, by name) no longer names,
// still there: Prune deletes them, and the baremetal-operator holds them
// until it has deprovisioned the host. None when the cluster has no
// BareMetalHost kind (no baremetal-operator).
func Leaving(ctx context.Context, c *kube.Client, cluster string, keep []string) ([]LeavingHost, error) {
	bmhs, err := c.ListObjects(ctx, bmhResource, render.Namespace, hostObjects)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the hosts that leave the site: %w", err)
	}
	var out []LeavingHost
	for _, u := range Stale(bmhs, cluster, keep) {
		if mac := bootMAC(u); mac != "" {
			out = append(out, LeavingHost{Host: u.GetLabels()[render.LabelHost], MAC: mac})
		}
	}
	return out, nil
}

// bootMAC is a BareMetalHost's spec.bootMACAddress as dnsmasq reads it;
// "" when it has none that parses.
func bootMAC(u unstructured.Unstructured) string {
	s, _, _ := unstructured.NestedString(u.Object, "spec", "bootMACAddress")
	mac, err := site.NormalizeMAC(s)
	if err != nil {
		return ""
	}
	return mac
}
