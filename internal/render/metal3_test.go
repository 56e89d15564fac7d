package render

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/bootstick/bootstick/internal/site"
)

// ironicEnv is the ironic-config ConfigMap Metal3 renders for in.
func ironicEnv(t *testing.T, in Metal3Inputs) map[string]string {
	t.Helper()
	in.Provisioning = site.ProvisioningNetwork{Interface: "eno2", Address: "172.22.0.1/24",
		DHCPRange: site.DHCPRange{Start: "172.22.0.10", End: "172.22.0.100"}}
	in.Auth = IronicAuth{Username: "u", Password: "p"}
	objs, err := Metal3(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if cm, ok := o.(*corev1.ConfigMap); ok && cm.Name == IronicConfig {
			return cm.Data
		}
	}
	t.Fatalf("Metal3 rendered no ConfigMap %s", IronicConfig)
	return nil
}

// TestMetal3DHCPServers: the site's DNS servers reach dnsmasq as DHCP_DNS,
// IPv4 addresses only (a DHCPv4 option carries no name and no IPv6
// address); without any, it is not set and run-dnsmasq names none. The
// NTP server DHCP names, and the one the deploy ramdisk sets its clock
// from, is this machine when it serves the site's clock, and none when it
// does not. DHCP_ROUTER is never set: the site has no gateway on the
// provisioning network.
func TestMetal3DHCPServers(t *testing.T) {
	for _, c := range []struct {
		name  string
		dns   []string
		clock bool
		want  map[string]string
	}{
		{"none", nil, true, map[string]string{"DHCP_NTP": "172.22.0.1"}},
		{"two", []string{"10.10.0.1", "10.10.0.2"}, true, map[string]string{"DHCP_DNS": "10.10.0.1,10.10.0.2", "DHCP_NTP": "172.22.0.1"}},
		{"names and IPv6 left out", []string{"2001:db8::53", "10.10.0.1"}, true, map[string]string{"DHCP_DNS": "10.10.0.1", "DHCP_NTP": "172.22.0.1"}},
		{"no site clock", []string{"10.10.0.1"}, false, map[string]string{"DHCP_DNS": "10.10.0.1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := ironicEnv(t, Metal3Inputs{DNS: c.dns, SiteClock: c.clock})
			params := "console=ttyS0,115200n8"
			if c.clock {
				params += " ipa-ntp-server=172.22.0.1"
			}
			if env["IRONIC_KERNEL_PARAMS"] != params {
				t.Errorf("the ramdisk's kernel arguments are %q, want %q", env["IRONIC_KERNEL_PARAMS"], params)
			}
			for _, k := range []string{"DHCP_DNS", "DHCP_NTP", "DHCP_ROUTER"} {
				got, ok := env[k]
				want, wok := c.want[k]
				if ok != wok || got != want {
					t.Errorf("%s = %q (set %v), want %q (set %v)", k, got, ok, want, wok)
				}
			}
			if env["PROVISIONING_IP"] != "172.22.0.1" || env["DHCP_RANGE"] != "172.22.0.10,172.22.0.100" {
				t.Errorf("PROVISIONING_IP %q, DHCP_RANGE %q", env["PROVISIONING_IP"], env["DHCP_RANGE"])
			}
		})
	}
}

// TestMetal3ProvisioningLimit: the site's provisioningLimit reaches BMO as
// PROVISIONING_LIMIT; without it BMO keeps its own default.
func TestMetal3ProvisioningLimit(t *testing.T) {
	for limit, want := range map[int]string{0: "", 2: "2"} {
		in := Metal3Inputs{ProvisioningLimit: limit, Auth: IronicAuth{Username: "u", Password: "p"},
			Provisioning: site.ProvisioningNetwork{Interface: "eno2", Address: "172.22.0.1/24", DHCPRange: site.DHCPRange{Start: "172.22.0.10", End: "172.22.0.100"}}}
		objs, err := Metal3(in)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			if cm, ok := o.(*corev1.ConfigMap); ok && cm.Name == BMOConfig && cm.Namespace == BMONamespace {
				if got, ok := cm.Data["PROVISIONING_LIMIT"]; got != want || ok != (want != "") {
					t.Errorf("provisioningLimit %d: PROVISIONING_LIMIT %q (set %v), want %q", limit, got, ok, want)
				}
			}
		}
	}
}

// TestMetal3DHCPHosts: Ironic's dnsmasq answers the site's hosts only
// unless the site says any machine (DHCP_HOSTS, which run-dnsmasq reads);
// a site read without defaults (ReadEarly) gets the default.
func TestMetal3DHCPHosts(t *testing.T) {
	for given, want := range map[string]string{"": "site", "site": "site", "any": "any"} {
		in := Metal3Inputs{Auth: IronicAuth{Username: "u", Password: "p"},
			Provisioning: site.ProvisioningNetwork{Interface: "eno2", Address: "172.22.0.1/24",
				DHCPRange: site.DHCPRange{Start: "172.22.0.10", End: "172.22.0.100"}, DHCPHosts: given}}
		objs, err := Metal3(in)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			if cm, ok := o.(*corev1.ConfigMap); ok && cm.Name == IronicConfig {
				if got := cm.Data["DHCP_HOSTS"]; got != want {
					t.Errorf("dhcpHosts %q: DHCP_HOSTS = %q, want %q", given, got, want)
				}
				if _, ok := cm.Data["DHCP_IGNORE_MACS"]; ok {
					t.Errorf("DHCP_IGNORE_MACS is set: the host list refuses virtual-media hosts now")
				}
			}
		}
	}
}
