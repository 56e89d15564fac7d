package ramdisk

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestNetdataUnits: the deploy ramdisk's bootstick-netdata turns a
// virtual-media ISO's network_data.json into systemd-networkd files that
// sort before the DHCP fallback: a static address with its gateway on the
// boot NIC (matched by MAC, in lower case, and as a NIC: a VLAN or bond
// shares its MAC), IPv6 with a mask as Ironic's schema writes it, a VLAN
// on a bond of two NICs, two VLANs whose kernel names would be cut to the
// same 15 characters, DNS, DHCP where the data asks for it, and an entry
// naming a link that is not there, left out and named.
func TestNetdataUnits(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 (the ramdisk's own interpreter runs bootstick-netdata): %v", err)
	}
	script, err := filepath.Abs("../../images/ipa/usr/local/sbin/bootstick-netdata")
	if err != nil {
		t.Fatal(err)
	}
	const nd = `{"links": [
	  {"id": "prov", "type": "phy", "ethernet_mac_address": "52:54:00:B0:07:1A", "mtu": 9000},
	  {"id": "p1", "type": "phy", "ethernet_mac_address": "52:54:00:00:00:01"},
	  {"id": "p2", "type": "phy", "ethernet_mac_address": "52:54:00:00:00:02"},
	  {"id": "bond0", "type": "bond", "ethernet_mac_address": "52:54:00:00:00:01", "bond_mode": "802.3ad", "bond_links": ["p1", "p2"]},
	  {"id": "v100", "type": "vlan", "vlan_mac_address": "52:54:00:00:00:01", "vlan_link": "bond0", "vlan_id": 100},
	  {"id": "enp175s0f0np0", "type": "phy", "ethernet_mac_address": "52:54:00:00:00:03"},
	  {"id": "va", "type": "vlan", "vlan_mac_address": "52:54:00:00:00:03", "vlan_link": "enp175s0f0np0", "vlan_id": 1001},
	  {"id": "vb", "type": "vlan", "vlan_mac_address": "52:54:00:00:00:03", "vlan_link": "enp175s0f0np0", "vlan_id": 1002}],
	 "networks": [
	  {"id": "n1", "type": "ipv4", "link": "prov", "ip_address": "172.22.0.53", "netmask": "255.255.255.0",
	   "routes": [{"network": "0.0.0.0", "netmask": "0.0.0.0", "gateway": "172.22.0.1"},
	              {"network": "10.0.0.0", "netmask": "255.0.0.0", "gateway": "172.22.0.254"}]},
	  {"id": "n2", "type": "ipv4_dhcp", "link": "v100"},
	  {"id": "n3", "type": "ipv6", "link": "prov", "ip_address": "fd00::53", "netmask": "ffff:ffff:ffff:ffff::",
	   "routes": [{"network": "::", "netmask": "::", "gateway": "fd00::1"}]},
	  {"id": "n4", "type": "ipv6_dhcp", "link": "va"},
	  {"id": "n5", "type": "ipv4", "link": "nope", "ip_address": "10.0.0.9", "netmask": "255.255.255.0"}],
	 "services": [{"type": "dns", "address": "172.22.0.1"}]}`
	prog := `import importlib.machinery, importlib.util, json, sys
loader = importlib.machinery.SourceFileLoader("netdata", sys.argv[1])
spec = importlib.util.spec_from_loader("netdata", loader)
m = importlib.util.module_from_spec(spec)
loader.exec_module(m)
skipped = []
for name, text in sorted(m.units(json.loads(sys.argv[2]), skipped).items()):
    print("== " + name)
    print(text)
for what in skipped:
    print("== skipped " + what)
`
	out, err := exec.Command(py, "-c", prog, script, nd).CombinedOutput()
	if err != nil {
		t.Fatalf("bootstick-netdata: %v\n%s", err, out)
	}
	files := map[string]string{}
	for _, part := range strings.Split(string(out), "== ")[1:] {
		name, text, _ := strings.Cut(part, "\n")
		files[name] = text
	}
	for name, want := range map[string][]string{
		"10-netdata-prov.network": {"[Match]\nMACAddress=52:54:00:b0:07:1a\nType=ether\n", "Address=172.22.0.53/24\n", "Gateway=172.22.0.1\n", "DNS=172.22.0.1\n",
			"[Link]\nMTUBytes=9000\n", "[Route]\nDestination=10.0.0.0/8\nGateway=172.22.0.254\n",
			"Address=fd00::53/64\n", "Gateway=fd00::1\n", "LinkLocalAddressing=ipv6\n"},
		"10-netdata-p1.network":    {"MACAddress=52:54:00:00:00:01\nType=ether\n", "Bond=bond0\n", "LinkLocalAddressing=no\n"},
		"10-netdata-bond0.netdev":  {"Name=bond0\nKind=bond\n", "Mode=802.3ad\n"},
		"10-netdata-bond0.network": {"Name=bond0\n", "VLAN=bond0.100\n"},
		"10-netdata-v100.netdev":   {"Name=bond0.100\nKind=vlan\n", "Id=100\n"},
		"10-netdata-v100.network":  {"Name=bond0.100\n", "DHCP=ipv4\n"},
		"10-netdata-va.netdev":     {"Name=enp175s0f.1001\n"},
		"10-netdata-vb.netdev":     {"Name=enp175s0f.1002\n"},
		"10-netdata-va.network":    {"DHCP=ipv6\n", "IPv6AcceptRA=yes\n", "LinkLocalAddressing=ipv6\n"},
	} {
		got, ok := files[name]
		if !ok {
			t.Errorf("no %s; wrote %v", name, keys(files))
			continue
		}
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("%s has no %q:\n%s", name, w, got)
			}
		}
	}
	if !strings.Contains(string(out), "== skipped network n5 ('nope')") {
		t.Errorf("the network on a link that is not there is not named as left out:\n%s", out)
	}
	// The DHCP fallback (90-dhcp.network) must sort after every file.
	for name := range files {
		if strings.HasPrefix(name, "skipped") {
			continue
		}
		if name >= "90-dhcp.network" {
			t.Errorf("%s sorts after 90-dhcp.network: networkd would apply DHCP first", name)
		}
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
