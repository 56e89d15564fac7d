package netdata

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// TestFacts: what the site needs of a host's network, from either form:
// whether DHCP may ignore its boot NIC, the node's cluster address (IPv4:
// the application cluster is), and every address with where the site
// file names it.
func TestFacts(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		// staticOn are MACs StaticOn must say true of; others it must
		// say false of.
		staticOn, notStaticOn []string
		cluster               string
		// addresses are "path kind address".
		addresses []string
	}{
		{name: "DHCP",
			in:          `{version: 2, ethernets: {eno1: {match: {macaddress: "52:54:00:00:01:01"}, dhcp4: true}}}`,
			notStaticOn: []string{bootMAC}},
		{name: "a static NIC with a gateway and DNS servers",
			in: `{version: 2, ethernets: {eno1: {match: {macaddress: "52:54:00:00:01:01"}, addresses: [10.0.0.5/24], gateway4: 10.0.0.1,
  nameservers: {addresses: [10.0.0.53]}}}}`,
			staticOn: []string{bootMAC, "52-54-00-00-01-01", "52:54:00:00:01:01"}, notStaticOn: []string{"52:54:00:00:01:02", "not a MAC"},
			cluster: "10.0.0.5",
			addresses: []string{"networkData.ethernets.eno1.addresses[0] address 10.0.0.5", "networkData.ethernets.eno1.gateway4 gateway 10.0.0.1",
				"networkData.ethernets.eno1.nameservers.addresses[0] nameserver 10.0.0.53"}},
		{name: "static IPv4 and DHCP for IPv6 on the same NIC: it asks for DHCP",
			in:          `{version: 2, ethernets: {eno1: {match: {macaddress: "52:54:00:00:01:01"}, addresses: [10.0.0.5/24], dhcp6: true}}}`,
			notStaticOn: []string{bootMAC}, cluster: "10.0.0.5",
			addresses: []string{"networkData.ethernets.eno1.addresses[0] address 10.0.0.5"}},
		{name: "the default route's network is the cluster's, not the first",
			in: `version: 2
ethernets:
  eno1: {match: {macaddress: "52:54:00:00:01:01"}, addresses: [172.22.0.50/24]}
  eno2: {match: {macaddress: "52:54:00:00:01:02"}, addresses: [10.10.0.50/24], routes: [{to: default, via: 10.10.0.1}]}`,
			staticOn: []string{bootMAC, "52:54:00:00:01:02"}, cluster: "10.10.0.50",
			addresses: []string{"networkData.ethernets.eno1.addresses[0] address 172.22.0.50",
				"networkData.ethernets.eno2.addresses[0] address 10.10.0.50", "networkData.ethernets.eno2.routes[0].via gateway 10.10.0.1"}},
		{name: "no default route: the first static IPv4 address",
			in: `version: 2
ethernets:
  eno1: {match: {macaddress: "52:54:00:00:01:01"}, addresses: ["fd00::5/64", 172.22.0.50/24, 172.22.1.50/24]}`,
			staticOn: []string{bootMAC}, cluster: "172.22.0.50",
			addresses: []string{"networkData.ethernets.eno1.addresses[0] address fd00::5",
				"networkData.ethernets.eno1.addresses[1] address 172.22.0.50", "networkData.ethernets.eno1.addresses[2] address 172.22.1.50"}},
		{name: "IPv6 only: no cluster address (the cluster is IPv4)",
			in:       `{version: 2, ethernets: {eno1: {match: {macaddress: "52:54:00:00:01:01"}, addresses: ["fd00::5/64"], gateway6: "fd00::1"}}}`,
			staticOn: []string{bootMAC}, cluster: "",
			addresses: []string{"networkData.ethernets.eno1.addresses[0] address fd00::5", "networkData.ethernets.eno1.gateway6 gateway fd00::1"}},
		{name: "an IPv6 default route does not make its network the cluster's",
			in: `version: 2
ethernets:
  eno1: {match: {macaddress: "52:54:00:00:01:01"}, addresses: [172.22.0.50/24]}
  eno2: {match: {macaddress: "52:54:00:00:01:02"}, addresses: ["fd00::5/64"], gateway6: "fd00::1"}`,
			staticOn: []string{bootMAC, "52:54:00:00:01:02"}, cluster: "172.22.0.50",
			addresses: []string{"networkData.ethernets.eno1.addresses[0] address 172.22.0.50",
				"networkData.ethernets.eno2.addresses[0] address fd00::5", "networkData.ethernets.eno2.gateway6 gateway fd00::1"}},
		{name: "a static bond has its first member's MAC",
			in: `version: 2
ethernets:
  eno1: {match: {macaddress: "52:54:00:00:01:01"}}
  eno2: {match: {macaddress: "52:54:00:00:01:02"}}
bonds:
  bond0: {interfaces: [eno1, eno2], parameters: {mode: active-backup}, addresses: [10.0.0.5/24]}`,
			staticOn: []string{bootMAC}, notStaticOn: []string{"52:54:00:00:01:02"}, cluster: "10.0.0.5",
			addresses: []string{"networkData.bonds.bond0.addresses[0] address 10.0.0.5"}},
		{name: "a static VLAN on the boot NIC leaves the NIC itself without an address",
			in: `version: 2
ethernets:
  eno1: {match: {macaddress: "52:54:00:00:01:01"}}
vlans:
  vlan7: {id: 7, link: eno1, addresses: [10.7.0.5/24]}`,
			notStaticOn: []string{bootMAC}, cluster: "10.7.0.5",
			addresses: []string{"networkData.vlans.vlan7.addresses[0] address 10.7.0.5"}},
		{name: "OpenStack's form, with DNS servers of the host and of a network",
			in: `links: [{id: prov, type: phy, ethernet_mac_address: "52:54:00:00:01:01"}]
networks: [{id: v4, type: ipv4, link: prov, network_id: prov, ip_address: 172.22.0.60, netmask: 255.255.255.0,
  routes: [{network: 0.0.0.0, netmask: 0.0.0.0, gateway: 172.22.0.1}], services: [{type: dns, address: 172.22.0.53}, {type: dns, address: 10.0.0.53}]}]
services: [{type: dns, address: 10.0.0.53}]`,
			staticOn: []string{bootMAC}, cluster: "172.22.0.60",
			addresses: []string{"networkData.networks[0].ip_address address 172.22.0.60", "networkData.networks[0].routes[0].gateway gateway 172.22.0.1",
				"networkData.networks[0].services[0].address nameserver 172.22.0.53", "networkData.networks[0].services[1].address nameserver 10.0.0.53",
				"networkData.services[0].address nameserver 10.0.0.53"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nd := mustParse(t, tc.in)
			for _, mac := range tc.staticOn {
				if !nd.StaticOn(mac) {
					t.Errorf("StaticOn(%q) = false, want true", mac)
				}
			}
			for _, mac := range tc.notStaticOn {
				if nd.StaticOn(mac) {
					t.Errorf("StaticOn(%q) = true, want false", mac)
				}
			}
			if got := nd.ClusterAddress(""); got != tc.cluster {
				t.Errorf("ClusterAddress(\"\") = %q, want %q", got, tc.cluster)
			}
			var got []string
			for _, a := range nd.Addresses() {
				got = append(got, fmt.Sprintf("%s %s %s", a.Path, a.Kind, a.Addr))
			}
			if !slices.Equal(got, tc.addresses) {
				t.Errorf("Addresses():\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.addresses, "\n"))
			}
		})
	}
}

// TestClusterInterface: the site may name the link whose static IPv4
// address is the cluster's, over the default route's; a link that is not
// there, or has no static IPv4 address, is refused with its field path.
func TestClusterInterface(t *testing.T) {
	nd := mustParse(t, `version: 2
ethernets:
  eno1: {match: {macaddress: "52:54:00:00:01:01"}, addresses: [172.22.0.50/24], routes: [{to: default, via: 172.22.0.1}]}
  eno2: {match: {macaddress: "52:54:00:00:01:02"}, addresses: [10.20.0.50/24]}
  eno3: {match: {macaddress: "52:54:00:00:01:03"}, dhcp4: true}`)
	for link, want := range map[string]string{"": "172.22.0.50", "eno1": "172.22.0.50", "eno2": "10.20.0.50", "eno3": ""} {
		if got := nd.ClusterAddress(link); got != want {
			t.Errorf("ClusterAddress(%q) = %q, want %q", link, got, want)
		}
	}
	p := field.NewPath("hosts").Index(1).Child("clusterInterface")
	if err := nd.CheckClusterLink(p, "eno2"); err != nil {
		t.Errorf("eno2: %v", err)
	}
	for link, want := range map[string]string{
		"eno9": `hosts[1].clusterInterface: Not found: "eno9 (the networkData's links are eno1, eno2, eno3)"`,
		"eno3": `hosts[1].clusterInterface: Invalid value: "eno3": it has no static IPv4 address`,
	} {
		if err := nd.CheckClusterLink(p, link); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", link, err, want)
		}
	}
}

// TestAddressesOfRefusedData: network data with problems still gives the
// addresses that are valid, so that a site reports every problem at once.
func TestAddressesOfRefusedData(t *testing.T) {
	nd, errs := parse(t, `{version: 2, ethernets: {eno1: {match: {macaddress: "52:54:00:00:01:01"}, addresses: [10.120.0.5/24], gateway4: 172.22.0.1}}}`)
	if len(errs) != 1 || !strings.HasPrefix(errs[0].Error(), "networkData.ethernets.eno1.gateway4: Invalid value") {
		t.Fatalf("problems: %v", errs)
	}
	var got []string
	for _, a := range nd.Addresses() {
		got = append(got, fmt.Sprintf("%s %s", a.Path, a.Addr))
	}
	want := []string{"networkData.ethernets.eno1.addresses[0] 10.120.0.5", "networkData.ethernets.eno1.gateway4 172.22.0.1"}
	if !slices.Equal(got, want) {
		t.Errorf("Addresses() = %q, want %q", got, want)
	}
}
