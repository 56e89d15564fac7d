package netdata

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

const bootMAC = "52:54:00:00:01:01"

var root = field.NewPath("networkData")

// parse reads networkData as the site file has it (YAML).
func parse(t *testing.T, doc string) (*NetworkData, field.ErrorList) {
	t.Helper()
	var raw map[string]any
	if err := yaml.Unmarshal([]byte(doc), &raw); err != nil {
		t.Fatalf("test input is not YAML: %v", err)
	}
	return Parse(root, raw, bootMAC)
}

// mustParse reads networkData that must be valid.
func mustParse(t *testing.T, doc string) *NetworkData {
	t.Helper()
	nd, errs := parse(t, doc)
	if len(errs) > 0 {
		t.Fatalf("refused:\n%v", errs.ToAggregate())
	}
	return nd
}

// jsonOf is the network_data.json a host gets.
func jsonOf(t *testing.T, nd *NetworkData) string {
	t.Helper()
	b, err := nd.JSON()
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// compact is a JSON text without its white space.
func compact(t *testing.T, s string) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(s)); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, s)
	}
	return b.String()
}

// reparse reads network_data.json as OpenStack network data: what the
// converter writes, the strict reader takes, unchanged.
func reparse(t *testing.T, out string) {
	t.Helper()
	var raw map[string]any
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatal(err)
	}
	nd, errs := Parse(root, raw, bootMAC)
	if len(errs) > 0 {
		t.Fatalf("the written network_data.json is refused when read back:\n%v\n%s", errs.ToAggregate(), out)
	}
	if again := jsonOf(t, nd); again != out {
		t.Errorf("read back, the network data changes:\n%s\nwant:\n%s", again, out)
	}
}

// TestConvertNetplan: netplan's version 2 becomes the network_data.json
// cloud-init and the deploy ramdisk read, and that reads back unchanged.
func TestConvertNetplan(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"DHCP ethernet",
			`{version: 2, ethernets: {eno1: {match: {macaddress: "52:54:00:00:01:01"}, dhcp4: true}}}`,
			`{"links":[{"id":"eno1","type":"phy","ethernet_mac_address":"52:54:00:00:01:01"}],
			  "networks":[{"id":"eno1-dhcp4","type":"ipv4_dhcp","link":"eno1","network_id":"eno1-dhcp4"}],
			  "services":[]}`},
		{"under a network key, as netplan files have it",
			`{network: {version: 2, ethernets: {eno1: {match: {macaddress: "52:54:00:00:01:01"}, dhcp6: true}}}}`,
			`{"links":[{"id":"eno1","type":"phy","ethernet_mac_address":"52:54:00:00:01:01"}],
			  "networks":[{"id":"eno1-dhcp6","type":"ipv6_dhcp","link":"eno1","network_id":"eno1-dhcp6"}],
			  "services":[]}`},
		{"static ethernet with gateway, routes, DNS and MTU",
			`version: 2
ethernets:
  eno1:
    match: {macaddress: 52-54-00-00-01-0A}
    mtu: 9000
    addresses: [10.0.0.5/24]
    gateway4: 10.0.0.1
    routes: [{to: 10.1.0.0/16, via: 10.0.0.254}]
    nameservers: {addresses: [10.0.0.53, 10.0.0.54]}`,
			`{"links":[{"id":"eno1","type":"phy","ethernet_mac_address":"52:54:00:00:01:0a","mtu":9000}],
			  "networks":[{"id":"eno1-ipv4-0","type":"ipv4","link":"eno1","network_id":"eno1-ipv4-0","ip_address":"10.0.0.5","netmask":"255.255.255.0",
			    "routes":[{"network":"0.0.0.0","netmask":"0.0.0.0","gateway":"10.0.0.1"},{"network":"10.1.0.0","netmask":"255.255.0.0","gateway":"10.0.0.254"}]}],
			  "services":[{"type":"dns","address":"10.0.0.53"},{"type":"dns","address":"10.0.0.54"}]}`},
		{"default route in routes, to the second address's subnet",
			`version: 2
ethernets:
  eno1:
    match: {macaddress: "52:54:00:00:01:01"}
    addresses: [172.22.0.50/24, 10.10.0.50/24]
    routes: [{to: default, via: 10.10.0.1}]`,
			`{"links":[{"id":"eno1","type":"phy","ethernet_mac_address":"52:54:00:00:01:01"}],
			  "networks":[{"id":"eno1-ipv4-0","type":"ipv4","link":"eno1","network_id":"eno1-ipv4-0","ip_address":"172.22.0.50","netmask":"255.255.255.0"},
			    {"id":"eno1-ipv4-1","type":"ipv4","link":"eno1","network_id":"eno1-ipv4-1","ip_address":"10.10.0.50","netmask":"255.255.255.0",
			     "routes":[{"network":"0.0.0.0","netmask":"0.0.0.0","gateway":"10.10.0.1"}]}],
			  "services":[]}`},
		{"IPv6 static with a link-local gateway, beside DHCP for IPv4",
			`version: 2
ethernets:
  eno1:
    match: {macaddress: "52:54:00:00:01:01"}
    dhcp4: true
    addresses: ["2001:DB8::5/64"]
    gateway6: fe80::1
    routes: [{to: "2001:db8:1::/48", via: "2001:db8::fe"}]
    nameservers: {addresses: ["2001:db8::53"]}`,
			`{"links":[{"id":"eno1","type":"phy","ethernet_mac_address":"52:54:00:00:01:01"}],
			  "networks":[{"id":"eno1-dhcp4","type":"ipv4_dhcp","link":"eno1","network_id":"eno1-dhcp4"},
			    {"id":"eno1-ipv6-0","type":"ipv6","link":"eno1","network_id":"eno1-ipv6-0","ip_address":"2001:db8::5","netmask":"ffff:ffff:ffff:ffff::",
			     "routes":[{"network":"::","netmask":"::","gateway":"fe80::1"},{"network":"2001:db8:1::","netmask":"ffff:ffff:ffff::","gateway":"2001:db8::fe"}]}],
			  "services":[{"type":"dns","address":"2001:db8::53"}]}`},
		{"bond of two NICs, with the first member's MAC",
			`version: 2
ethernets:
  eno1: {match: {macaddress: "52:54:00:00:01:01"}}
  eno2: {match: {macaddress: "52:54:00:00:01:02"}, mtu: 9000}
bonds:
  bond0:
    interfaces: [eno1, eno2]
    parameters: {mode: 802.3ad, mii-monitor-interval: 100}
    mtu: 9000
    addresses: [10.0.0.5/24]
    gateway4: 10.0.0.1`,
			`{"links":[{"id":"eno1","type":"phy","ethernet_mac_address":"52:54:00:00:01:01"},
			    {"id":"eno2","type":"phy","ethernet_mac_address":"52:54:00:00:01:02","mtu":9000},
			    {"id":"bond0","type":"bond","ethernet_mac_address":"52:54:00:00:01:01","mtu":9000,"bond_mode":"802.3ad","bond_links":["eno1","eno2"],"bond_miimon":100}],
			  "networks":[{"id":"bond0-ipv4-0","type":"ipv4","link":"bond0","network_id":"bond0-ipv4-0","ip_address":"10.0.0.5","netmask":"255.255.255.0",
			    "routes":[{"network":"0.0.0.0","netmask":"0.0.0.0","gateway":"10.0.0.1"}]}],
			  "services":[]}`},
		{"VLAN over a bond with a MAC of its own, DHCP on the bond",
			`version: 2
ethernets:
  eno1: {match: {macaddress: "52:54:00:00:01:01"}}
  eno2: {match: {macaddress: "52:54:00:00:01:02"}}
bonds:
  bond0: {interfaces: [eno2, eno1], macaddress: "02:00:00:00:00:b0", parameters: {mode: active-backup}, dhcp4: true}
vlans:
  vlan100: {id: 100, link: bond0, addresses: [192.168.100.5/24], gateway4: 192.168.100.1}
  vlan200: {id: 200, link: bond0, macaddress: "02:00:00:00:02:00", dhcp4: true}`,
			`{"links":[{"id":"eno1","type":"phy","ethernet_mac_address":"52:54:00:00:01:01"},
			    {"id":"eno2","type":"phy","ethernet_mac_address":"52:54:00:00:01:02"},
			    {"id":"bond0","type":"bond","ethernet_mac_address":"02:00:00:00:00:b0","bond_mode":"active-backup","bond_links":["eno2","eno1"]},
			    {"id":"vlan100","type":"vlan","vlan_link":"bond0","vlan_id":100,"vlan_mac_address":"02:00:00:00:00:b0"},
			    {"id":"vlan200","type":"vlan","vlan_link":"bond0","vlan_id":200,"vlan_mac_address":"02:00:00:00:02:00"}],
			  "networks":[{"id":"bond0-dhcp4","type":"ipv4_dhcp","link":"bond0","network_id":"bond0-dhcp4"},
			    {"id":"vlan100-ipv4-0","type":"ipv4","link":"vlan100","network_id":"vlan100-ipv4-0","ip_address":"192.168.100.5","netmask":"255.255.255.0",
			     "routes":[{"network":"0.0.0.0","netmask":"0.0.0.0","gateway":"192.168.100.1"}]},
			    {"id":"vlan200-dhcp4","type":"ipv4_dhcp","link":"vlan200","network_id":"vlan200-dhcp4"}],
			  "services":[]}`},
		{"VLAN over an ethernet takes the NIC's MAC; DNS servers once",
			`version: 2
ethernets:
  eno1: {match: {macaddress: "52:54:00:00:01:01"}, dhcp4: true, nameservers: {addresses: [10.0.0.53]}}
vlans:
  eno1.42: {id: 42, link: eno1, addresses: [10.42.0.5/24], nameservers: {addresses: [10.0.0.53, 10.42.0.53]}}`,
			`{"links":[{"id":"eno1","type":"phy","ethernet_mac_address":"52:54:00:00:01:01"},
			    {"id":"eno1.42","type":"vlan","vlan_link":"eno1","vlan_id":42,"vlan_mac_address":"52:54:00:00:01:01"}],
			  "networks":[{"id":"eno1-dhcp4","type":"ipv4_dhcp","link":"eno1","network_id":"eno1-dhcp4"},
			    {"id":"eno1.42-ipv4-0","type":"ipv4","link":"eno1.42","network_id":"eno1.42-ipv4-0","ip_address":"10.42.0.5","netmask":"255.255.255.0"}],
			  "services":[{"type":"dns","address":"10.0.0.53"},{"type":"dns","address":"10.42.0.53"}]}`},
		{"a NIC with nothing on it is still a link",
			`{version: 2, ethernets: {eno1: {match: {macaddress: "52:54:00:00:01:01"}}}}`,
			`{"links":[{"id":"eno1","type":"phy","ethernet_mac_address":"52:54:00:00:01:01"}],"networks":[],"services":[]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := jsonOf(t, mustParse(t, tc.in))
			if compact(t, got) != compact(t, tc.want) {
				t.Errorf("network_data.json:\n%s\nwant:\n%s", compact(t, got), compact(t, tc.want))
			}
			reparse(t, got)
		})
	}
}

// TestOpenStack: OpenStack network data is taken as it is, in canonical
// form (MACs in lower case with colons, addresses compressed), with the
// lists Ironic requires written even when the site leaves them out.
func TestOpenStack(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"a NIC with a static address and a default route, no services",
			`links: [{id: prov, type: phy, ethernet_mac_address: "52:54:00:00:01:0A"}]
networks: [{id: v4, type: ipv4, link: prov, network_id: prov, ip_address: 172.22.0.60, netmask: 255.255.255.0,
  routes: [{network: 0.0.0.0, netmask: 0.0.0.0, gateway: 172.22.0.1}]}]`,
			`{"links":[{"id":"prov","type":"phy","ethernet_mac_address":"52:54:00:00:01:0a"}],
			  "networks":[{"id":"v4","type":"ipv4","link":"prov","network_id":"prov","ip_address":"172.22.0.60","netmask":"255.255.255.0",
			    "routes":[{"network":"0.0.0.0","netmask":"0.0.0.0","gateway":"172.22.0.1"}]}],
			  "services":[]}`},
		{"bond, VLAN, IPv6, SLAAC and DNS",
			`links:
- {id: p1, type: phy, ethernet_mac_address: "52:54:00:00:00:01", mtu: 9000}
- {id: p2, type: phy, ethernet_mac_address: "52:54:00:00:00:02"}
- {id: bond0, type: bond, ethernet_mac_address: "52:54:00:00:00:01", bond_mode: balance-xor, bond_links: [p1, p2], bond_miimon: 100}
- {id: v100, type: vlan, vlan_mac_address: "52:54:00:00:00:01", vlan_link: bond0, vlan_id: 100}
networks:
- {id: n1, type: ipv6, link: v100, network_id: n1, ip_address: "FD00:0:0:0::53", netmask: "ffff:ffff:ffff:ffff::",
   routes: [{network: "::", netmask: "::", gateway: "fd00::1"}], services: [{type: dns, address: "fd00::53"}]}
- {id: n2, type: ipv6_slaac, link: bond0, network_id: n2}
services: [{type: dns, address: 10.0.0.53}]`,
			`{"links":[{"id":"p1","type":"phy","ethernet_mac_address":"52:54:00:00:00:01","mtu":9000},
			    {"id":"p2","type":"phy","ethernet_mac_address":"52:54:00:00:00:02"},
			    {"id":"bond0","type":"bond","ethernet_mac_address":"52:54:00:00:00:01","bond_mode":"balance-xor","bond_links":["p1","p2"],"bond_miimon":100},
			    {"id":"v100","type":"vlan","vlan_link":"bond0","vlan_id":100,"vlan_mac_address":"52:54:00:00:00:01"}],
			  "networks":[{"id":"n1","type":"ipv6","link":"v100","network_id":"n1","ip_address":"fd00::53","netmask":"ffff:ffff:ffff:ffff::",
			     "routes":[{"network":"::","netmask":"::","gateway":"fd00::1"}],"services":[{"type":"dns","address":"fd00::53"}]},
			    {"id":"n2","type":"ipv6_slaac","link":"bond0","network_id":"n2"}],
			  "services":[{"type":"dns","address":"10.0.0.53"}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := jsonOf(t, mustParse(t, tc.in))
			if compact(t, got) != compact(t, tc.want) {
				t.Errorf("network_data.json:\n%s\nwant:\n%s", compact(t, got), compact(t, tc.want))
			}
			reparse(t, got)
		})
	}
}

// refusals checks that each input is refused with exactly the problems
// listed, each given by the start of its message (field path first).
func refusals(t *testing.T, cases []refusal) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, errs := parse(t, tc.in)
			var got []string
			for _, e := range errs {
				got = append(got, e.Error())
			}
			if len(got) != len(tc.want) {
				t.Errorf("%d problems, want %d:\n%s", len(got), len(tc.want), strings.Join(got, "\n"))
			}
			for _, w := range tc.want {
				found := false
				for _, g := range got {
					found = found || strings.HasPrefix(g, w)
				}
				if !found {
					t.Errorf("no problem starting %q in:\n%s", w, strings.Join(got, "\n"))
				}
			}
		})
	}
}

type refusal struct {
	name, in string
	want     []string
}

// eth is a valid ethernet for the refusal cases.
const eth = `eno1: {match: {macaddress: "52:54:00:00:01:01"}`

func TestNetplanRefusals(t *testing.T) {
	refusals(t, []refusal{
		{"not network data", `{}`,
			[]string{"networkData: Required value: give the host's network either as netplan (version: 2 with ethernets, bonds, vlans) or as OpenStack"}},
		{"an ethernet without match, the only one",
			`{version: 2, ethernets: {eno1: {dhcp4: true}}}`,
			[]string{`networkData.ethernets.eno1.match: Required value: network_data.json names NICs by MAC: add match: {macaddress: "52:54:00:00:01:01"}`}},
		{"match by name",
			`{version: 2, ethernets: {eno1: {match: {name: "en*"}, dhcp4: true}}}`,
			[]string{"networkData.ethernets.eno1.match.name: Forbidden: network_data.json names NICs by MAC, not by name",
				"networkData.ethernets.eno1.match.macaddress: Required value"}},
		{"set-name and a MAC to set",
			`{version: 2, ethernets: {` + eth + `, set-name: lan0, macaddress: "02:00:00:00:00:01"}}}`,
			[]string{"networkData.ethernets.eno1.macaddress: Forbidden: network_data.json names a NIC by its MAC and cannot change it",
				"networkData.ethernets.eno1.set-name: Forbidden: network_data.json cannot rename a NIC"}},
		{"a device name no interface can have, yes for true, a huge number",
			`{version: 2, ethernets: {"eno/1": {match: {macaddress: "52:54:00:00:01:01"}}, eno2: {match: {macaddress: "52:54:00:00:01:02"}},
  eno3: {match: {macaddress: "52:54:00:00:01:03"}, dhcp4: yes}},
  bonds: {bond0: {interfaces: [eno2], parameters: {mode: active-backup, mii-monitor-interval: 18446744073709551615}}}}`,
			[]string{`networkData.ethernets.eno/1: Invalid value: "eno/1": must be an interface name: 1 to 15 letters, digits, '.', '_' or '-'`,
				`networkData.ethernets.eno3.dhcp4: Invalid value: "yes": must be true or false (yes and no are text here)`,
				"networkData.bonds.bond0.parameters.mii-monitor-interval: Invalid value: 18446744073709551615: must be from 0 to 2147483647"}},
		{"version 1", `{version: 1, config: []}`,
			[]string{"networkData.version: Invalid value: 1: cloud-init's version 1 network config is not converted"}},
		{"version as a string", `{version: "2", ethernets: {}}`,
			[]string{`networkData.version: Invalid value: "2": netplan's version is the number 2`}},
		{"a network key beside others", `{network: {version: 2}, version: 2}`,
			[]string{"networkData: Invalid value: network wraps the whole network configuration"}},
		{"bridges, wifis, a renderer, OpenStack's links and an unknown key",
			`{version: 2, renderer: networkd, bridges: {br0: {}}, wifis: {}, links: [], bogus: 1}`,
			[]string{"networkData.bogus: Forbidden: netplan network config takes only version, ethernets, bonds, vlans: remove it",
				"networkData.bridges: Forbidden: network_data.json has no bridges",
				"networkData.links: Forbidden: links is OpenStack's form",
				"networkData.renderer: Forbidden: the OS image's cloud-init picks the renderer",
				"networkData.wifis: Forbidden: a provisioned host's network is wired"}},
		{"an unknown key on an ethernet",
			`{version: 2, ethernets: {` + eth + `, dhcp: true}}}`,
			[]string{"networkData.ethernets.eno1.dhcp: Forbidden: an ethernet takes only match, dhcp4, dhcp6, addresses"}},
		{"search domains",
			`{version: 2, ethernets: {` + eth + `, dhcp4: true, nameservers: {search: [example.org]}}}}`,
			[]string{"networkData.ethernets.eno1.nameservers.search: Forbidden: network_data.json carries no search domains"}},
		{"dhcp4 as a word", `{version: 2, ethernets: {` + eth + `, dhcp4: "yes"}}}`,
			[]string{`networkData.ethernets.eno1.dhcp4: Invalid value: "yes": must be true or false`}},
		{"addresses: no prefix, /32, the network's, not an address",
			`{version: 2, ethernets: {` + eth + `, addresses: [10.0.0.5, 10.0.0.6/32, 10.0.0.0/24, eno1]}}}`,
			[]string{`networkData.ethernets.eno1.addresses[0]: Invalid value: "10.0.0.5": has no prefix length: give it, e.g. 10.0.0.5/24`,
				`networkData.ethernets.eno1.addresses[1]: Invalid value: "10.0.0.6/32": a /32 netmask is not one network_data.json takes`,
				`networkData.ethernets.eno1.addresses[2]: Invalid value: "10.0.0.0/24": is the subnet's network address`,
				`networkData.ethernets.eno1.addresses[3]: Invalid value: "eno1": not an address with its prefix length`}},
		{"a gateway outside the subnet",
			`{version: 2, ethernets: {` + eth + `, addresses: [10.0.0.5/24], gateway4: 10.1.0.1}}}`,
			[]string{`networkData.ethernets.eno1.gateway4: Invalid value: "10.1.0.1": is outside the subnet 10.0.0.0/24 it is reached on: give a router inside it`}},
		{"a gateway with DHCP only",
			`{version: 2, ethernets: {` + eth + `, dhcp4: true, gateway4: 10.0.0.1}}}`,
			[]string{`networkData.ethernets.eno1.gateway4: Invalid value: "10.0.0.1": eno1 has no static IPv4 address to reach it from`}},
		{"a gateway of the wrong family",
			`{version: 2, ethernets: {` + eth + `, addresses: [10.0.0.5/24], gateway4: "fd00::1"}}}`,
			[]string{`networkData.ethernets.eno1.gateway4: Invalid value: "fd00::1": not an IPv4 address`}},
		{"routes: a metric, host bits, no via, a /32",
			`{version: 2, ethernets: {` + eth + `, addresses: [10.0.0.5/24], routes: [{to: 10.1.0.0/16, via: 10.0.0.1, metric: 100}, {to: 10.2.0.1/16, via: 10.0.0.1}, {to: 10.3.0.0/16}, {to: 10.4.0.1/32, via: 10.0.0.1}]}}}`,
			[]string{"networkData.ethernets.eno1.routes[0].metric: Forbidden: network_data.json has no route metrics",
				`networkData.ethernets.eno1.routes[1].to: Invalid value: "10.2.0.1/16": has host bits: did you mean 10.2.0.0/16?`,
				"networkData.ethernets.eno1.routes[2].via: Required value",
				`networkData.ethernets.eno1.routes[3].to: Invalid value: "10.4.0.1/32": Ironic's schema takes no /32 route`}},
		{"two default routes",
			`version: 2
ethernets:
  ` + eth + `, addresses: [10.0.0.5/24], gateway4: 10.0.0.1}
  eno2: {match: {macaddress: "52:54:00:00:01:02"}, addresses: [10.1.0.5/24], routes: [{to: 0.0.0.0/0, via: 10.1.0.1}]}`,
			[]string{"networkData.ethernets.eno2.routes[0]: Invalid value: a second default IPv4 route (networkData.ethernets.eno1.gateway4 is one): give the host one"}},
		{"the same NIC twice, a name in two sections, an MTU too small",
			`version: 2
ethernets:
  ` + eth + `, mtu: 60}
  eno2: {match: {macaddress: "52:54:00:00:01:01"}}
bonds:
  eno1: {interfaces: [eno2], parameters: {mode: active-backup}}`,
			[]string{`networkData.ethernets.eno1.mtu: Invalid value: 60: must be from 68 to 65535`,
				`networkData.ethernets.eno2.match.macaddress: Invalid value: "52:54:00:00:01:01": networkData.ethernets.eno1.match.macaddress is this NIC already`,
				`networkData.bonds.eno1: Invalid value: "eno1": networkData.ethernets.eno1 has this name too`}},
		{"bonds: no mode, an unknown mode, members that are not NICs, twice, in two bonds, with addresses",
			`version: 2
ethernets:
  ` + eth + `, addresses: [10.0.0.5/24]}
  eno2: {match: {macaddress: "52:54:00:00:01:02"}}
bonds:
  bond0: {interfaces: [eno1, eno1, eno9]}
  bond1: {interfaces: [eno1, eno2, bond0], parameters: {mode: lacp, lacp-rate: fast}}`,
			[]string{"networkData.bonds.bond0.parameters.mode: Required value: give the bonding mode: one of 802.3ad, active-backup",
				`networkData.bonds.bond0.interfaces[1]: Invalid value: "eno1": is listed twice`,
				`networkData.bonds.bond0.interfaces[2]: Not found: "eno9": a bond's members are NICs: name one under ethernets`,
				`networkData.bonds.bond1.interfaces[0]: Invalid value: "eno1": is a member of bond bond0 already`,
				`networkData.bonds.bond1.interfaces[2]: Invalid value: "bond0": is a bond: a bond's members are NICs under ethernets`,
				"networkData.bonds.bond1.parameters.lacp-rate: Forbidden: a bond's parameters takes only mode, mii-monitor-interval",
				`networkData.bonds.bond1.parameters.mode: Unsupported value: "lacp"`,
				"networkData.ethernets.eno1.addresses: Forbidden: a bond member carries no network of its own: put it on bond bond0"}},
		{"VLANs: ids out of range, on nothing, on a VLAN, on a bond member, the same twice",
			`version: 2
ethernets:
  ` + eth + `}
  eno2: {match: {macaddress: "52:54:00:00:01:02"}}
bonds:
  bond0: {interfaces: [eno2], parameters: {mode: active-backup}}
vlans:
  v0: {id: 0, link: eno1}
  v1: {id: 4095, link: eno1}
  v2: {id: 2, link: eno9}
  v3: {id: 3, link: v4}
  v4: {id: 4, link: eno2}
  v5: {link: eno1}
  v6: {id: 6, link: bond0}
  v7: {id: 6, link: bond0}`,
			[]string{`networkData.vlans.v0.id: Invalid value: 0: must be from 1 to 4094`,
				`networkData.vlans.v1.id: Invalid value: 4095: must be from 1 to 4094`,
				`networkData.vlans.v2.link: Not found: "eno9": name the ethernet or bond the VLAN is on`,
				`networkData.vlans.v3.link: Invalid value: "v4": is a VLAN: put a VLAN on an ethernet or a bond`,
				`networkData.vlans.v4.link: Invalid value: "eno2": is a member of bond bond0: put the VLAN on the bond`,
				"networkData.vlans.v5.id: Required value: give the VLAN's id, 1 to 4094",
				`networkData.vlans.v7.id: Invalid value: 6: networkData.vlans.v6 is this VLAN on bond0 already`}},
	})
}

func TestOpenStackRefusals(t *testing.T) {
	const phy = `{id: p1, type: phy, ethernet_mac_address: "52:54:00:00:01:01"}`
	refusals(t, []refusal{
		{"links: unknown keys, unknown types, no MAC, a bad MAC, a multicast MAC, the same id twice",
			`links:
- {id: p1, type: phy, ethernet_mac_address: "52:54:00:00:01:01", name: eth0}
- {id: p2, type: ovs, ethernet_mac_address: "52:54:00:00:01:02"}
- {id: p3, type: phy}
- {id: p4, type: phy, ethernet_mac_address: "52:54:00:00:01"}
- {id: p5, type: phy, ethernet_mac_address: "01:00:5e:00:00:01"}
- {id: p1, type: phy, ethernet_mac_address: "52:54:00:00:01:06"}
- {type: phy, ethernet_mac_address: "52:54:00:00:01:07"}
- {id: "a link id too long", type: phy, ethernet_mac_address: "52:54:00:00:01:08"}`,
			[]string{"networkData.links[0].name: Forbidden: a phy link takes only id, type, ethernet_mac_address, mtu: remove it",
				`networkData.links[1].type: Unsupported value: "ovs": supported values: "phy", "bond", "vlan"`,
				"networkData.links[2].ethernet_mac_address: Required value",
				`networkData.links[3].ethernet_mac_address: Invalid value: "52:54:00:00:01": not a MAC address`,
				`networkData.links[4].ethernet_mac_address: Invalid value: "01:00:5e:00:00:01": a multicast address is no NIC's`,
				`networkData.links[5].id: Invalid value: "p1": networkData.links[0] has this id too`,
				"networkData.links[6].id: Required value: give the link an id",
				`networkData.links[7].id: Invalid value: "a link id too long": must be an interface name`}},
		{"bonds and VLANs: fields Ironic requires, links that are not there or cannot be used",
			`links:
- ` + phy + `
- {id: b0, type: bond, ethernet_mac_address: "52:54:00:00:01:01"}
- {id: b1, type: bond, ethernet_mac_address: "52:54:00:00:01:01", bond_mode: fast, bond_links: [p1, p9, v1]}
- {id: v1, type: vlan, vlan_link: p9, vlan_id: 10, vlan_mac_address: "52:54:00:00:01:01"}
- {id: v2, type: vlan, vlan_link: v1, vlan_mac_address: "52:54:00:00:01:01"}
- {id: v3, type: vlan, vlan_link: p1, vlan_id: 3, vlan_mac_address: "52:54:00:00:01:01"}`,
			[]string{"networkData.links[1].bond_mode: Required value",
				"networkData.links[1].bond_links: Required value: list the ids of the bond's member NICs",
				`networkData.links[2].bond_mode: Unsupported value: "fast"`,
				`networkData.links[2].bond_links[1]: Not found: "p9": no link has this id: name the ids of links: b0, b1, p1, v1, v2, v3`,
				`networkData.links[2].bond_links[2]: Invalid value: "v1": is a vlan: a bond's members are phy links`,
				`networkData.links[3].vlan_link: Not found: "p9"`,
				"networkData.links[4].vlan_id: Required value",
				`networkData.links[4].vlan_link: Invalid value: "v1": is a VLAN: put a VLAN on a phy link or a bond`,
				`networkData.links[5].vlan_link: Invalid value: "p1": is a member of bond b1: put the VLAN on the bond`}},
		{"networks: fields Ironic requires, links that are not there, the same id twice, a network on a bond member",
			`links:
- ` + phy + `
- {id: b0, type: bond, ethernet_mac_address: "52:54:00:00:01:01", bond_mode: active-backup, bond_links: [p1]}
networks:
- {id: n1, type: ipv4_dhcp, link: b0}
- {id: n2, type: ipv4_dhcp, link: p9, network_id: n2}
- {id: n1, type: ipv4_dhcp, link: b0, network_id: n1}
- {id: n4, type: ipv6_dhcp, link: p1, network_id: n4}
- {id: n5, type: static, link: b0, network_id: n5}`,
			[]string{"networkData.networks[0].network_id: Required value: give the network's network_id (any name: Ironic requires one; its id will do)",
				`networkData.networks[1].link: Not found: "p9": no link has this id: name the ids of links: b0, p1`,
				`networkData.networks[2].id: Invalid value: "n1": networkData.networks[0] has this id too`,
				`networkData.networks[3].link: Invalid value: "p1": is a member of bond b0, which carries no network of its own: put the network on b0`,
				`networkData.networks[4].type: Unsupported value: "static"`}},
		{"static networks: no address, no netmask, the wrong family, a netmask with holes or as a length, a /32",
			`links: [` + phy + `]
networks:
- {id: n1, type: ipv4, link: p1, network_id: n1}
- {id: n2, type: ipv4, link: p1, network_id: n2, ip_address: "fd00::5", netmask: 255.255.255.0}
- {id: n3, type: ipv4, link: p1, network_id: n3, ip_address: 10.0.0.5, netmask: 255.0.255.0}
- {id: n4, type: ipv6, link: p1, network_id: n4, ip_address: "fd00::5", netmask: "64"}
- {id: n5, type: ipv4, link: p1, network_id: n5, ip_address: 10.0.0.5, netmask: 255.255.255.255}
- {id: n6, type: ipv4, link: p1, network_id: n6, ip_address: 10.0.0.255, netmask: 255.255.255.0}`,
			[]string{"networkData.networks[0].ip_address: Required value: a static network needs its address (or make it ipv4_dhcp)",
				"networkData.networks[0].netmask: Required value: give the subnet's netmask, e.g. 255.255.255.0",
				`networkData.networks[1].ip_address: Invalid value: "fd00::5": not an IPv4 address`,
				`networkData.networks[2].netmask: Invalid value: "255.0.255.0": not a netmask such as 255.255.255.0`,
				`networkData.networks[3].netmask: Invalid value: "64": not a netmask such as ffff:ffff:ffff:ffff:: (a /64)`,
				`networkData.networks[4].netmask: Invalid value: "255.255.255.255": Ironic's schema takes no netmask 255.255.255.255`,
				`networkData.networks[5].ip_address: Invalid value: "10.0.0.255": is the subnet's broadcast address`}},
		{"DHCP networks take no address or routes",
			`links: [` + phy + `]
networks: [{id: n1, type: ipv4_dhcp, link: p1, network_id: n1, ip_address: 10.0.0.5, routes: []}]`,
			[]string{"networkData.networks[0].ip_address: Forbidden: an ipv4_dhcp network takes its address and routes from DHCP: remove ip_address, or make the network ipv4",
				"networkData.networks[0].routes: Forbidden: an ipv4_dhcp network takes its address and routes from DHCP: remove routes"}},
		{"routes: fields Ironic requires, host bits, a gateway outside the subnet, DNS on a route, two defaults",
			`links: [` + phy + `]
networks:
- id: n1
  type: ipv4
  link: p1
  network_id: n1
  ip_address: 10.0.0.5
  netmask: 255.255.255.0
  routes:
  - {network: 10.1.0.0, netmask: 255.255.0.0}
  - {network: 10.2.0.1, netmask: 255.255.0.0, gateway: 10.0.0.1}
  - {network: 10.3.0.0, netmask: 255.255.0.0, gateway: 10.9.0.1}
  - {network: 10.4.0.0, netmask: 255.255.0.0, gateway: 10.0.0.1, services: []}
  - {network: 0.0.0.0, netmask: 0.0.0.0, gateway: 10.0.0.1}
  - {network: 0.0.0.0, netmask: 0.0.0.0, gateway: 10.0.0.2}`,
			[]string{"networkData.networks[0].routes[0].gateway: Required value",
				`networkData.networks[0].routes[1].network: Invalid value: "10.2.0.1": has host bits under its netmask: did you mean 10.2.0.0?`,
				`networkData.networks[0].routes[2].gateway: Invalid value: "10.9.0.1": is outside the subnet 10.0.0.0/24`,
				"networkData.networks[0].routes[3].services: Forbidden: give DNS servers in the top-level services",
				"networkData.networks[0].routes[5]: Invalid value: a second default IPv4 route (networkData.networks[0].routes[4] is one)"}},
		{"services: DNS only, by address",
			`links: [` + phy + `]
services: [{type: ntp, address: 10.0.0.1}, {type: dns, address: ns1.example.org}]
extra: {}`,
			[]string{"networkData.extra: Forbidden: OpenStack network data takes only links, networks, services: remove it",
				`networkData.services[0].type: Unsupported value: "ntp": supported values: "dns"`,
				`networkData.services[1].address: Invalid value: "ns1.example.org": not an IP address`}},
		{"lists that are not lists, items that are not mappings, ids that are numbers",
			`{links: {id: p1}, networks: [eno1], services: [{type: dns, address: 10.0.0.53}, 5], }`,
			[]string{"networkData.links: Invalid value: must be a list, not a mapping",
				"networkData.networks[0]: Invalid value: must be a mapping, not a string",
				"networkData.services[1]: Invalid value: must be a mapping, not a number"}},
		{"an id that is a number",
			`links: [{id: 1, type: phy, ethernet_mac_address: "52:54:00:00:01:01"}]`,
			[]string{"networkData.links[0].id: Invalid value: 1: must be a string, not a number"}},
	})
}
