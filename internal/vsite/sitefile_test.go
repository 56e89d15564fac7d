package vsite

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bootstick/bootstick/internal/site"
)

// The site file of a virtual site is one firstboot takes: valid, with
// the DHCP range and the dhcpHosts it was given.
func TestSiteFileIsAValidSite(t *testing.T) {
	s := &Site{opts: Options{HostIface: "vs-host", Network: netip.MustParsePrefix("172.22.0.0/24"),
		HostAddr: netip.MustParseAddr("172.22.0.1"), BMCAddr: netip.MustParseAddr("172.22.0.2"),
		Machines: []Machine{{Name: "node-0", MAC: "52:54:00:b0:07:40", BMCPort: 6230, BMCUser: "admin", BMCPassword: "pw-node-0"}}}}
	for _, c := range []struct {
		dhcpHosts, want string
	}{{"", "site"}, {"any", "any"}} {
		data, err := s.SiteFile(SiteConfig{Cluster: "edge", Image: SiteImage{URL: "http://172.22.0.1:6180/images/os.qcow2", Format: "qcow2",
			Checksum: strings.Repeat("ab", 32)},
			Hosts: []SiteHost{{Machine: "node-0"}}, DHCPStart: netip.MustParseAddr("172.22.0.10"), DHCPEnd: netip.MustParseAddr("172.22.0.40"),
			DHCPHosts: c.dhcpHosts})
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(t.TempDir(), "site.yaml")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := site.Load(p, site.Options{})
		if err != nil {
			t.Fatalf("dhcpHosts %q: %v\n%s", c.dhcpHosts, err, data)
		}
		if mode := got.Bootstrap.Provisioning.DHCPHostsMode(); mode != c.want || got.Bootstrap.Provisioning.DHCPRange.Start != "172.22.0.10" {
			t.Errorf("dhcpHosts %q: the site's is %q, its range %+v; want %q", c.dhcpHosts, mode, got.Bootstrap.Provisioning.DHCPRange, c.want)
		}
	}
}
