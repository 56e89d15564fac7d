package render

import (
	"crypto/rand"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/bootstick/bootstick/internal/site"
)

// testTLS stands for the provisioning CA and Ironic's certificate
// (render copies them, it does not read them).
var testTLS = IronicTLSFiles{CA: []byte("CA PEM"), CAKey: []byte("CA KEY PEM"), Cert: []byte("CERT PEM"), Key: []byte("KEY PEM")}

const testRamdiskURL = "http://172.22.0.1:6180/deploy/ironic-python-agent.initramfs"

// ironicEnv is the ironic-config ConfigMap Metal3 renders for in.
func ironicEnv(t *testing.T, in Metal3Inputs) map[string]string {
	t.Helper()
	in.Provisioning = site.ProvisioningNetwork{Interface: "eno2", Address: "172.22.0.1/24",
		DHCPRange: site.DHCPRange{Start: "172.22.0.10", End: "172.22.0.100"}}
	in.Auth = IronicAuth{Username: "u", Password: "p"}
	in.TLS = testTLS
	in.VMediaPath = testVMediaPath
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
		in := Metal3Inputs{ProvisioningLimit: limit, Auth: IronicAuth{Username: "u", Password: "p"}, TLS: testTLS, VMediaPath: testVMediaPath,
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
		in := Metal3Inputs{Auth: IronicAuth{Username: "u", Password: "p"}, TLS: testTLS, VMediaPath: testVMediaPath,
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

// TestMetal3TLS: BMO talks to Ironic over HTTPS and verifies it against
// the provisioning CA alone, and hands Ironic the deploy ramdisk that
// trusts it. Ironic's Pod gets its certificate, key and the CA as a TLS
// Secret; the CA's key is only in firstboot's own Secret, and no
// ConfigMap carries a key. Without TLS Metal3 refuses to render.
func TestMetal3TLS(t *testing.T) {
	in := Metal3Inputs{Auth: IronicAuth{Username: "u", Password: "p"}, TLS: testTLS, VMediaPath: testVMediaPath,
		Provisioning: site.ProvisioningNetwork{Interface: "eno2", Address: "172.22.0.1/24",
			DHCPRange: site.DHCPRange{Start: "172.22.0.10", End: "172.22.0.100"}}}
	objs, err := Metal3(in)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.ConfigMap:
			for k, v := range o.Data {
				if strings.Contains(v, "KEY PEM") {
					t.Errorf("ConfigMap %s/%s holds a key in %s", o.Namespace, o.Name, k)
				}
			}
			switch {
			case o.Namespace == BMONamespace && o.Name == BMOConfig:
				seen["bmo"] = true
				if o.Data["IRONIC_ENDPOINT"] != "https://172.22.0.1:6385/v1/" || o.Data["IRONIC_CACERT_FILE"] != BMOIronicCAFile ||
					o.Data["DEPLOY_RAMDISK_URL"] != testRamdiskURL || o.Data["IRONIC_INSECURE"] != "" {
					t.Errorf("BMO's settings: %v", o.Data)
				}
			case o.Namespace == BMONamespace && o.Name == BMOIronicCA:
				seen["bmo-ca"] = true
				if o.Data["ca.crt"] != "CA PEM" {
					t.Errorf("BMO's CA: %v", o.Data)
				}
			}
		case *corev1.Secret:
			switch {
			case o.Namespace == IronicNamespace && o.Name == IronicTLS:
				seen["tls"] = true
				if o.Type != corev1.SecretTypeTLS || string(o.Data["tls.crt"]) != "CERT PEM" || string(o.Data["tls.key"]) != "KEY PEM" ||
					string(o.Data["ca.crt"]) != "CA PEM" || len(o.Data) != 3 {
					t.Errorf("Ironic's TLS Secret: type %s, keys %d", o.Type, len(o.Data))
				}
			case o.Namespace == IronicNamespace && o.Name == ProvisioningCA:
				seen["ca"] = o.StringData["ca.key"] == "CA KEY PEM"
			default:
				for k, v := range o.StringData {
					if strings.Contains(v, "KEY PEM") {
						t.Errorf("Secret %s/%s holds a TLS key in %s", o.Namespace, o.Name, k)
					}
				}
			}
		}
	}
	for _, w := range []string{"bmo", "bmo-ca", "tls", "ca"} {
		if !seen[w] {
			t.Errorf("Metal3 rendered no %s object (or not as it should be)", w)
		}
	}
	in.TLS.Key = nil
	if _, err := Metal3(in); err == nil || !strings.Contains(err.Error(), "TLS") {
		t.Errorf("Metal3 without Ironic's key: %v, want refused", err)
	}
}

// testVMediaPath is a secret path as NewVMediaPath makes one.
const testVMediaPath = "Zm9yIHRoZSB0ZXN0cyBvbmx5LCBub3QgYSBzZWNyZXQ"

// TestMetal3VMediaPath: the virtual-media ISOs' secret path goes into a
// Secret of its own, which the ironic Pod reads, and into no ConfigMap.
// NewVMediaPath makes a new one each time, of the letters the Ironic
// image's scripts take; Metal3 refuses to render without one.
func TestMetal3VMediaPath(t *testing.T) {
	a, err := NewVMediaPath(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewVMediaPath(rand.Reader)
	if a == b || !vmediaPath.MatchString(a) {
		t.Errorf("NewVMediaPath made %q and %q", a, b)
	}
	in := Metal3Inputs{Auth: IronicAuth{Username: "u", Password: "p"}, TLS: testTLS, VMediaPath: a,
		Provisioning: site.ProvisioningNetwork{Interface: "eno2", Address: "172.22.0.1/24",
			DHCPRange: site.DHCPRange{Start: "172.22.0.10", End: "172.22.0.100"}}}
	objs, err := Metal3(in)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.ConfigMap:
			for k, v := range o.Data {
				if strings.Contains(v, a) {
					t.Errorf("ConfigMap %s/%s holds the secret path in %s", o.Namespace, o.Name, k)
				}
			}
		case *corev1.Secret:
			if o.Namespace == IronicNamespace && o.Name == IronicVMedia {
				found = o.StringData["path"] == a && len(o.StringData) == 1
			}
		}
	}
	if !found {
		t.Errorf("no Secret %s/%s holds the path alone", IronicNamespace, IronicVMedia)
	}
	for _, bad := range []string{"", "short", "a/b/" + a, a + "?x"} {
		in.VMediaPath = bad
		if _, err := Metal3(in); err == nil || strings.Contains(err.Error(), a) {
			t.Errorf("Metal3 with path %q: %v, want refused without the path in words", bad, err)
		}
	}
}
