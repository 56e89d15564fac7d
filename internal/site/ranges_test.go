package site

import (
	"strings"
	"testing"
)

// TestClusterRanges: the defaults of both clusters are clear of each
// other; each range that overlaps another, and each site address inside a
// range, is refused with its field path.
func TestClusterRanges(t *testing.T) {
	base := `apiVersion: bootstick.dev/v1alpha1
kind: Site
bootstrap:
  provisioning:
    interface: eno2
    address: 172.22.0.1/24
    dhcpRange: {start: 172.22.0.10, end: 172.22.0.100}
  external: {interface: eno1, address: 10.10.0.5/24, gateway: 10.10.0.1}
  dataDisk: /dev/sdb
  ntp: [10.10.0.1]
  dns: [10.10.0.1]
BOOTSTRAP
hosts:
- name: master-0
  role: master
  bmc:
    address: ipmi://BMC:623
    credentials: {username: admin, password: pw-ranges-1}
  bootMACAddress: 52:54:00:00:01:0a
  image: {bundled: ubuntu-22.04}
  networkData:
    version: 2
    ethernets:
      eno1: {match: {macaddress: "52:54:00:00:01:0a"}, addresses: [HOSTADDR/24], gateway4: 172.22.0.1, nameservers: {addresses: [10.10.0.1]}}
cluster:
  name: r
CLUSTER
`
	for _, tc := range []struct {
		name                              string
		bootstrap, cluster, bmc, hostAddr string
		want                              []string // "" entries: it loads
	}{
		{name: "defaults", bmc: "10.10.1.10", hostAddr: "172.22.0.50"},
		{name: "the application cluster on the appliance's ranges",
			cluster: "  podCIDR: 10.244.0.0/16\n  serviceCIDR: 10.96.0.0/12", bmc: "10.10.1.10", hostAddr: "172.22.0.50",
			want: []string{"cluster.podCIDR: Invalid value: \"10.244.0.0/16\": overlaps bootstrap.podCIDR 10.244.0.0/16",
				"cluster.serviceCIDR: Invalid value: \"10.96.0.0/12\": overlaps bootstrap.serviceCIDR 10.96.0.0/12"}},
		{name: "the appliance's pods over the external network",
			bootstrap: "  podCIDR: 10.10.0.0/16", bmc: "10.10.1.10", hostAddr: "172.22.0.50",
			want: []string{"bootstrap.podCIDR: Invalid value: \"10.10.0.0/16\": overlaps the site's network 10.10.0.0/24 (bootstrap.external.address)",
				"bootstrap.external.gateway: Invalid value: \"10.10.0.1\": is inside bootstrap.podCIDR 10.10.0.0/16",
				"bootstrap.ntp[0]: Invalid value: \"10.10.0.1\": is inside bootstrap.podCIDR",
				"hosts[0].bmc.address: Invalid value: \"10.10.1.10\": is inside bootstrap.podCIDR",
				"hosts[0].networkData.ethernets.eno1.nameservers.addresses[0]: Invalid value: \"10.10.0.1\": is inside bootstrap.podCIDR"}},
		{name: "a host address inside the application cluster's services",
			bmc: "10.10.1.10", hostAddr: "10.120.0.5",
			want: []string{"hosts[0].networkData.ethernets.eno1.addresses[0]: Invalid value: \"10.120.0.5\": is inside cluster.serviceCIDR 10.112.0.0/12"}},
		// Only the bootstrap machine reaches a BMC: the application
		// cluster's ranges do not matter to it, the appliance's do.
		{name: "a BMC inside the application cluster's services", bmc: "10.112.0.9", hostAddr: "172.22.0.50"},
		{name: "a BMC inside the appliance's services", bmc: "10.96.0.9", hostAddr: "172.22.0.50",
			want: []string{"hosts[0].bmc.address: Invalid value: \"10.96.0.9\": is inside bootstrap.serviceCIDR 10.96.0.0/12"}},
		{name: "a range with host bits", cluster: "  podCIDR: 10.128.0.1/16", bmc: "10.10.1.10", hostAddr: "172.22.0.50",
			want: []string{"cluster.podCIDR: Invalid value: \"10.128.0.1/16\": has host bits set: did you mean 10.128.0.0/16?"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := strings.NewReplacer("BOOTSTRAP", tc.bootstrap, "CLUSTER", tc.cluster, "BMC", tc.bmc, "HOSTADDR", tc.hostAddr).Replace(base)
			_, err := Parse("ranges/site.yaml", []byte(doc), Options{BundledImages: testImages})
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatalf("it loads; want %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("no %q in:\n%v", w, err)
				}
			}
		})
	}
}
