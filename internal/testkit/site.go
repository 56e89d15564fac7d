package testkit

import (
	"fmt"
	"strings"
)

// SiteYAML makes a site file of n hosts named PREFIX-host-NN: the first three
// (or one, when n < 3) masters, the rest workers; even hosts on ipmi://,
// odd ones on redfish://. MACs are 52:54:00:MM:NN:NN with MM from mac.
// Three masters share the control-plane VIP 172.22.0.5.
func SiteYAML(cluster, prefix string, n, mac int) string {
	masters := 3
	if n < 3 {
		masters = 1
	}
	vip := ""
	if masters == 3 {
		vip = "  controlPlaneVIP: 172.22.0.5\n"
	}
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: bootstick.dev/v1alpha1
kind: Site
bootstrap:
  provisioning:
    interface: eno2
    address: 172.22.0.1/16
    dhcpRange: {start: 172.22.1.1, end: 172.22.200.254}
  dataDisk: /dev/sdb
cluster:
  name: %s
  kudPlugins: [flannel]
%shosts:
`, cluster, vip)
	for i := 0; i < n; i++ {
		role := "worker"
		if i < masters {
			role = "master"
		}
		bmc := fmt.Sprintf("ipmi://10.10.%d.%d:623", i/200, i%200+1)
		if i%2 == 1 {
			bmc = fmt.Sprintf("redfish://10.10.%d.%d/redfish/v1/Systems/1", i/200, i%200+1)
		}
		fmt.Fprintf(&b, `- name: %s-host-%02d
  role: %s
  bmc:
    address: %s
    credentials: {username: admin, password: BenchPW-%d}
  bootMACAddress: 52:54:00:%02x:%02x:%02x
  image: {url: "http://172.22.0.1:6180/images/os.qcow2", checksum: %s}
  requirements: {cpu: 16, memory: 64Gi}
`, prefix, i, role, bmc, i, mac%256, i/256, i%256, strings.Repeat("ab", 32))
	}
	return b.String()
}
