package render

import (
	"slices"
	"testing"

	metal3 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	corev1 "k8s.io/api/core/v1"

	"github.com/bootstick/bootstick/internal/site"
)

// vmediaSite has a virtual-media host with OpenStack network data (no
// DHCP), one with netplan network data asking for DHCP, one with OpenStack
// network data asking for DHCP, and one booted by PXE.
const vmediaSite = `apiVersion: bootstick.dev/v1alpha1
kind: Site
bootstrap:
  provisioning:
    interface: eno2
    address: 172.22.0.1/24
    dhcpRange: {start: 172.22.0.10, end: 172.22.0.100}
  dataDisk: /dev/sdb
hosts:
- name: vm-static
  role: master
  bmc:
    address: redfish-virtualmedia+https://10.10.1.11/redfish/v1/Systems/1
    credentials: {username: admin, password: pw-static-1}
  bootMACAddress: 52-54-00-00-01-0A
  image: {bundled: ubuntu-22.04}
  networkData:
    links: [{id: prov, type: phy, ethernet_mac_address: "52:54:00:00:01:0a"}]
    networks: [{id: v4, type: ipv4, link: prov, network_id: prov, ip_address: 172.22.0.60, netmask: 255.255.255.0}]
    services: []
- name: vm-netplan
  role: worker
  bmc:
    address: idrac-virtualmedia://10.10.1.12/redfish/v1/Systems/System.Embedded.1
    credentials: {username: admin, password: pw-netplan-2}
  bootMACAddress: 52:54:00:00:01:0b
  image: {bundled: ubuntu-22.04}
  networkData: {version: 2, ethernets: {eno1: {match: {macaddress: "52:54:00:00:01:0b"}, dhcp4: true}}}
- name: vm-dhcp
  role: worker
  bmc:
    address: redfish-virtualmedia://10.10.1.14/redfish/v1/Systems/1
    credentials: {username: admin, password: pw-dhcp-4}
  bootMACAddress: 52:54:00:00:01:0d
  image: {bundled: ubuntu-22.04}
  networkData:
    links: [{id: prov, type: phy, ethernet_mac_address: "52:54:00:00:01:0d"}]
    networks: [{id: v4, type: ipv4_dhcp, link: prov, network_id: prov}]
    services: []
- name: pxe-static
  role: worker
  bmc:
    address: redfish://10.10.1.13/redfish/v1/Systems/1
    credentials: {username: admin, password: pw-pxe-3}
  bootMACAddress: 52:54:00:00:01:0c
  image: {bundled: ubuntu-22.04}
  networkData:
    links: [{id: prov, type: phy, ethernet_mac_address: "52:54:00:00:01:0c"}]
    networks: [{id: v4, type: ipv4, link: prov, network_id: prov, ip_address: 172.22.0.61, netmask: 255.255.255.0}]
    services: []
cluster: {name: vm}
`

// TestVirtualMediaNeedsNoDHCP: a host booted by virtual media with
// network data (OpenStack's, or netplan's converted to it) gets it as its
// preprovisioning network data (its deploy ramdisk's), and when that gives
// its boot NIC a static address, DHCP's host list refuses its MAC
// (written as dnsmasq reads it, whatever form the site used). Hosts whose
// network data asks for DHCP, and a host booted by PXE, are answered.
// Ironic's configuration says which machines DHCP answers: the site's
// hosts, by default.
func TestVirtualMediaNeedsNoDHCP(t *testing.T) {
	s, err := site.Parse("vm/site.yaml", []byte(vmediaSite), site.Options{BundledImages: testImages})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Render(s, Options{SSHKey: testKey(t), Images: testImages})
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckWebhook(objs); err != nil {
		t.Fatal(err)
	}
	pre := map[string]string{}
	for _, o := range objs {
		if b, ok := o.(*metal3.BareMetalHost); ok {
			pre[b.Name] = b.Spec.PreprovisioningNetworkDataName
		}
	}
	want := map[string]string{"vm-static": NetworkDataSecretName("vm-static"), "vm-dhcp": NetworkDataSecretName("vm-dhcp"),
		"vm-netplan": NetworkDataSecretName("vm-netplan"), "pxe-static": ""}
	for name, w := range want {
		if pre[name] != w {
			t.Errorf("%s: preprovisioningNetworkDataName %q, want %q", name, pre[name], w)
		}
	}

	early, err := site.ParseEarly("vm/site.yaml", []byte(vmediaSite))
	if err != nil {
		t.Fatal(err)
	}
	wantHosts := []site.DHCPHost{{Name: "vm-static", MAC: "52:54:00:00:01:0a"}, {Name: "vm-netplan", MAC: "52:54:00:00:01:0b", Answer: true},
		{Name: "vm-dhcp", MAC: "52:54:00:00:01:0d", Answer: true}, {Name: "pxe-static", MAC: "52:54:00:00:01:0c", Answer: true}}
	if got := early.DHCPHosts(); !slices.Equal(got, wantHosts) {
		t.Errorf("DHCPHosts = %+v, want %+v", got, wantHosts)
	}
	m3, err := Metal3(Metal3Inputs{Provisioning: early.Bootstrap.Provisioning, Auth: IronicAuth{Username: "u", Password: "p"}, VMediaPath: testVMediaPath,
		BMCCA: []byte("PEM"), TLS: testTLS})
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, o := range m3 {
		cm, ok := o.(*corev1.ConfigMap)
		if !ok {
			continue
		}
		switch cm.Name {
		case IronicConfig:
			seen++
			if got := cm.Data["DHCP_HOSTS"]; got != site.DHCPHostsSite {
				t.Errorf("%s DHCP_HOSTS = %q, want %q", IronicConfig, got, site.DHCPHostsSite)
			}
		case IronicBMCCA:
			seen++
			if got := cm.Data["bmc-ca.pem"]; got != "PEM" {
				t.Errorf("%s bmc-ca.pem = %q", IronicBMCCA, got)
			}
		}
	}
	if seen != 2 {
		t.Errorf("Metal3 rendered %d of the ConfigMaps %s and %s", seen, IronicConfig, IronicBMCCA)
	}
}
