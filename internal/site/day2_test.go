package site

import (
	"os"
	"strings"
	"testing"
)

func TestFiles(t *testing.T) {
	s, err := Load("testdata/good.yaml", Options{BundledImages: testImages})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range s.Files() {
		got = append(got, f.Field+"="+f.Path)
	}
	if strings.Join(got, " ") != "hosts[1].bmc.credentials.file=creds/worker-0.yaml" {
		t.Errorf("Files = %v", got)
	}
}

// FixedChanges names each field of bootstrap (but provisioningLimit) and
// the cluster's name and ranges that a new site changes, with both values;
// defaults count as written; hosts and other fields may change.
func TestFixedChanges(t *testing.T) {
	data, err := os.ReadFile("testdata/good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	running, err := ParseEarly("testdata/good.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	load := func(edit func(string) string) *Site {
		t.Helper()
		s, err := Parse("testdata/good.yaml", []byte(edit(string(data))), Options{BundledImages: testImages})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	same := func(s string) string { return s }
	for _, c := range []struct {
		name string
		edit func(string) string
		want []string
	}{
		{"same", same, nil},
		{"defaults written out", func(s string) string {
			return strings.Replace(s, "  dns: [10.10.0.1]\n", "  dns: [10.10.0.1]\n  podCIDR: 10.244.0.0/16\n  provisioningLimit: 2\n", 1)
		}, nil},
		{"DHCP's default written out", func(s string) string {
			return strings.Replace(s, "      end: 172.22.0.100\n", "      end: 172.22.0.100\n    dhcpHosts: site\n", 1)
		}, nil},
		{"DHCP for any machine", func(s string) string {
			return strings.Replace(s, "      end: 172.22.0.100\n", "      end: 172.22.0.100\n    dhcpHosts: any\n", 1)
		}, []string{
			`bootstrap.provisioning.dhcpHosts: "any", where the running site has "site"`,
		}},
		{"a host less", func(s string) string {
			i := strings.Index(s, "- name: worker-0")
			j := strings.Index(s[i+1:], "- name:")
			return s[:i] + s[i+1+j:]
		}, nil},
		{"bootstrap", func(s string) string {
			s = strings.Replace(s, "ntp: [10.10.0.1, ntp.example.org]", "ntp: [10.10.0.2]", 1)
			s = strings.Replace(s, "    address: 172.22.0.1/24\n", "    address: 172.22.0.2/24\n", 1)
			return strings.Replace(s, "  dns: [10.10.0.1]\n", "", 1)
		}, []string{
			`bootstrap.dns: none, where the running site has [10.10.0.1]`,
			`bootstrap.ntp: [10.10.0.2], where the running site has [10.10.0.1, ntp.example.org]`,
			`bootstrap.provisioning.address: "172.22.0.2/24", where the running site has "172.22.0.1/24"`,
		}},
		{"cluster", func(s string) string {
			return strings.Replace(s, "cluster:\n  name: site-a\n", "cluster:\n  name: edge-2\n  serviceCIDR: 10.112.0.0/16\n", 1)
		}, []string{
			`cluster.name: "edge-2", where the running site has "site-a"`,
			`cluster.serviceCIDR: "10.112.0.0/16", where the running site has "10.112.0.0/12"`,
		}},
		{"a VIP added", func(s string) string {
			return strings.Replace(s, "cluster:\n  name: site-a\n", "cluster:\n  name: site-a\n  controlPlaneVIP: 172.22.0.5\n", 1)
		}, []string{
			`cluster.controlPlaneVIP: "172.22.0.5", where the running site has ""`,
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := FixedChanges(running, load(c.edit))
			if len(got) != len(c.want) {
				t.Fatalf("FixedChanges = %q, want %d", got, len(c.want))
			}
			for i, w := range c.want {
				if !strings.HasPrefix(got[i], w+":") {
					t.Errorf("FixedChanges[%d] = %q, want it to start %q", i, got[i], w)
				}
			}
		})
	}
}
