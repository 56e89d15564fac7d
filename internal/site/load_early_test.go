package site

import (
	"net/netip"
	"slices"
	"testing"
)

// TestClusterAddresses: of the README's example site, only worker-0 has a
// static cluster address (10.20.0.11 on its clusterInterface eno2); the
// other hosts take theirs by DHCP, and the firewall forwards to it.
func TestClusterAddresses(t *testing.T) {
	e, err := ReadEarly("../../examples/site.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got := e.ClusterAddresses()
	if want := []netip.Addr{netip.MustParseAddr("10.20.0.11")}; !slices.Equal(got, want) {
		t.Errorf("ClusterAddresses = %v, want %v", got, want)
	}
}
