package render

import (
	"encoding/json"
	"reflect"
	"testing"

	metal3 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/bootstick/bootstick/internal/bpa/install"
	"github.com/bootstick/bootstick/internal/site"
)

// netplanSite has a host with netplan network data (a bond and a VLAN on
// it), one with OpenStack's, and one with none.
const netplanSite = `apiVersion: bootstick.dev/v1alpha1
kind: Site
bootstrap:
  provisioning:
    interface: eno2
    address: 172.22.0.1/24
    dhcpRange: {start: 172.22.0.10, end: 172.22.0.100}
  dataDisk: /dev/sdb
hosts:
- name: netplan
  role: master
  bmc:
    address: redfish-virtualmedia://10.10.1.11/redfish/v1/Systems/1
    credentials: {username: admin, password: pw-1}
  bootMACAddress: 52:54:00:00:01:0a
  image: {bundled: ubuntu-22.04}
  networkData:
    network:
      version: 2
      ethernets:
        eno1: {match: {macaddress: "52:54:00:00:01:0A"}, addresses: [172.22.0.60/24]}
        eno2: {match: {macaddress: "52:54:00:00:02:0a"}}
        eno3: {match: {macaddress: "52:54:00:00:03:0a"}}
      bonds:
        bond0: {interfaces: [eno2, eno3], parameters: {mode: 802.3ad}}
      vlans:
        bond0.10:
          id: 10
          link: bond0
          addresses: [10.10.10.60/24]
          gateway4: 10.10.10.1
          nameservers: {addresses: [10.10.10.53]}
- name: openstack
  role: worker
  bmc:
    address: ipmi://10.10.1.12
    credentials: {username: admin, password: pw-2}
  bootMACAddress: 52:54:00:00:01:0b
  image: {bundled: ubuntu-22.04}
  networkData:
    links: [{id: prov, type: phy, ethernet_mac_address: "52:54:00:00:01:0b"}]
    networks: [{id: v4, type: ipv4, link: prov, network_id: prov, ip_address: 172.22.0.61, netmask: 255.255.255.0}]
- name: none
  role: worker
  bmc:
    address: ipmi://10.10.1.13
    credentials: {username: admin, password: pw-3}
  bootMACAddress: 52:54:00:00:01:0c
  image: {bundled: ubuntu-22.04}
cluster: {name: np}
`

// TestNetworkDataSecretIsOpenStackJSON: netplan network data reaches the
// host as OpenStack network_data.json, under the key the
// baremetal-operator reads, for both the OS and the deploy ramdisk; the
// BPA reaches each host at its cluster address.
func TestNetworkDataSecretIsOpenStackJSON(t *testing.T) {
	s, err := site.Parse("np/site.yaml", []byte(netplanSite), site.Options{BundledImages: testImages})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Render(s, Options{SSHKey: testKey(t), Images: testImages, Install: &install.Config{}})
	if err != nil {
		t.Fatal(err)
	}
	secrets := map[string]*corev1.Secret{}
	hosts := map[string]*metal3.BareMetalHost{}
	var cfg install.Config
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.Secret:
			secrets[o.Name] = o
		case *metal3.BareMetalHost:
			hosts[o.Name] = o
		case *corev1.ConfigMap:
			if err := json.Unmarshal([]byte(o.Data[install.ConfigKey]), &cfg); err != nil {
				t.Fatal(err)
			}
		}
	}

	sec := secrets[NetworkDataSecretName("netplan")]
	if sec == nil {
		t.Fatal("no network-data Secret for the netplan host")
	}
	raw := sec.Data["networkData"]
	// network_data.json, as Ironic writes it on the config drive.
	var got map[string]any
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("networkData is not JSON: %v\n%s", err, raw)
	}
	// The operator reads the key as YAML (sigs.k8s.io/yaml): the same.
	var asOperator map[string]any
	if err := yaml.Unmarshal(raw, &asOperator); err != nil || !reflect.DeepEqual(asOperator, got) {
		t.Errorf("the operator reads it otherwise (%v):\n%v\nwant:\n%v", err, asOperator, got)
	}
	var want map[string]any
	if err := json.Unmarshal([]byte(`{
	  "links": [
	    {"id": "eno1", "type": "phy", "ethernet_mac_address": "52:54:00:00:01:0a"},
	    {"id": "eno2", "type": "phy", "ethernet_mac_address": "52:54:00:00:02:0a"},
	    {"id": "eno3", "type": "phy", "ethernet_mac_address": "52:54:00:00:03:0a"},
	    {"id": "bond0", "type": "bond", "ethernet_mac_address": "52:54:00:00:02:0a", "bond_mode": "802.3ad", "bond_links": ["eno2", "eno3"]},
	    {"id": "bond0.10", "type": "vlan", "vlan_link": "bond0", "vlan_id": 10, "vlan_mac_address": "52:54:00:00:02:0a"}],
	  "networks": [
	    {"id": "eno1-ipv4-0", "type": "ipv4", "link": "eno1", "network_id": "eno1-ipv4-0", "ip_address": "172.22.0.60", "netmask": "255.255.255.0"},
	    {"id": "bond0.10-ipv4-0", "type": "ipv4", "link": "bond0.10", "network_id": "bond0.10-ipv4-0", "ip_address": "10.10.10.60", "netmask": "255.255.255.0",
	     "routes": [{"network": "0.0.0.0", "netmask": "0.0.0.0", "gateway": "10.10.10.1"}]}],
	  "services": [{"type": "dns", "address": "10.10.10.53"}]}`), &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("networkData:\n%s\nwant:\n%v", raw, want)
	}
	// A virtual-media host's deploy ramdisk gets it too, converted.
	if b := hosts["netplan"]; b.Spec.NetworkData == nil || b.Spec.NetworkData.Name != sec.Name || b.Spec.PreprovisioningNetworkDataName != sec.Name {
		t.Errorf("netplan host: networkData %v, preprovisioningNetworkDataName %q, want both %s", b.Spec.NetworkData, b.Spec.PreprovisioningNetworkDataName, sec.Name)
	}
	if b := hosts["openstack"]; b.Spec.PreprovisioningNetworkDataName != "" {
		t.Errorf("a PXE host's deploy ramdisk takes DHCP, but has preprovisioningNetworkDataName %q", b.Spec.PreprovisioningNetworkDataName)
	}
	// OpenStack network data is written whole, services included.
	var ops map[string]any
	if err := json.Unmarshal(secrets[NetworkDataSecretName("openstack")].Data["networkData"], &ops); err != nil || ops["services"] == nil {
		t.Errorf("openstack host's networkData (%v): %v", err, ops)
	}
	if _, ok := secrets[NetworkDataSecretName("none")]; ok || hosts["none"].Spec.NetworkData != nil {
		t.Error("a host without network data has a network-data Secret")
	}

	// The default route's network carries the cluster's traffic.
	for name, want := range map[string]string{"netplan": "10.10.10.60", "openstack": "172.22.0.61", "none": ""} {
		if got := cfg.Hosts[name].Address; got != want {
			t.Errorf("install config: host %s at %q, want %q", name, got, want)
		}
	}
}
