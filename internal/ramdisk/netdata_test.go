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
// boot NIC (matched by MAC, in lower case), a VLAN on a bond of two NICs,
// DNS, and DHCP where the data asks for it.
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
	  {"id": "bond0", "type": "bond", "bond_mode": "802.3ad", "bond_links": ["p1", "p2"]},
	  {"id": "v100", "type": "vlan", "vlan_link": "bond0", "vlan_id": 100}],
	 "networks": [
	  {"id": "n1", "type": "ipv4", "link": "prov", "ip_address": "172.22.0.53", "netmask": "255.255.255.0",
	   "routes": [{"network": "0.0.0.0", "netmask": "0.0.0.0", "gateway": "172.22.0.1"},
	              {"network": "10.0.0.0", "netmask": "255.0.0.0", "gateway": "172.22.0.254"}]},
	  {"id": "n2", "type": "ipv4_dhcp", "link": "v100"}],
	 "services": [{"type": "dns", "address": "172.22.0.1"}]}`
	prog := `import importlib.machinery, json, sys
m = importlib.machinery.SourceFileLoader("netdata", sys.argv[1]).load_module()
for name, text in sorted(m.units(json.loads(sys.argv[2])).items()):
    print("== " + name)
    print(text)
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
		"10-netdata-prov.network":  {"[Match]\nMACAddress=52:54:00:b0:07:1a\n", "Address=172.22.0.53/24\n", "Gateway=172.22.0.1\n", "DNS=172.22.0.1\n", "[Link]\nMTUBytes=9000\n", "[Route]\nDestination=10.0.0.0/8\nGateway=172.22.0.254\n", "LinkLocalAddressing=no\n"},
		"10-netdata-p1.network":    {"MACAddress=52:54:00:00:00:01\n", "Bond=bond0\n"},
		"10-netdata-bond0.netdev":  {"Name=bond0\nKind=bond\n", "Mode=802.3ad\n"},
		"10-netdata-bond0.network": {"Name=bond0\n", "VLAN=bond0.100\n"},
		"10-netdata-v100.netdev":   {"Name=bond0.100\nKind=vlan\n", "Id=100\n"},
		"10-netdata-v100.network":  {"Name=bond0.100\n", "DHCP=ipv4\n"},
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
	// The DHCP fallback (90-dhcp.network) must sort after every file.
	for name := range files {
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
