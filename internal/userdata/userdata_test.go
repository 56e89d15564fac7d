package userdata

import (
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/bootstick/bootstick/internal/sshkeys"
)

// TestCloudConfig writes user data and reads it back as cloud-init would
// (plain YAML after the #cloud-config line), field by field, and through
// Parse.
func TestCloudConfig(t *testing.T) {
	hk, err := sshkeys.Generate(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		h    Host
	}{
		{"with a host key and time", Host{Hostname: "m0", AuthorizedKeys: []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBPA bootstick", "ssh-rsa AAAAB3 ops"},
			HostKey: hk, NTPServers: []string{"172.22.0.1"}}},
		{"bare", Host{Hostname: "w1", AuthorizedKeys: []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBPA bootstick"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := CloudConfig(tc.h)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(string(data), "#cloud-config\n") {
				t.Fatalf("no #cloud-config line: %q", data)
			}
			var got struct {
				Hostname    string            `yaml:"hostname"`
				Keys        []string          `yaml:"ssh_authorized_keys"`
				DisableRoot *bool             `yaml:"disable_root"`
				PwAuth      *bool             `yaml:"ssh_pwauth"`
				DeleteKeys  bool              `yaml:"ssh_deletekeys"`
				GenKeyTypes *[]string         `yaml:"ssh_genkeytypes"`
				SSHKeys     map[string]string `yaml:"ssh_keys"`
				NTP         map[string]any    `yaml:"ntp"`
			}
			if err := yaml.Unmarshal(data, &got); err != nil {
				t.Fatal(err)
			}
			if got.Hostname != tc.h.Hostname || !slices.Equal(got.Keys, tc.h.AuthorizedKeys) || got.DisableRoot == nil || *got.DisableRoot {
				t.Errorf("hostname %q, keys %q, disable_root %v; want %q, %q, false", got.Hostname, got.Keys, got.DisableRoot, tc.h.Hostname, tc.h.AuthorizedKeys)
			}
			if got.PwAuth == nil || *got.PwAuth {
				t.Errorf("ssh_pwauth %v, want false: sshd must take keys only", got.PwAuth)
			}
			if tc.h.HostKey != nil {
				if !got.DeleteKeys || got.GenKeyTypes == nil || len(*got.GenKeyTypes) != 0 ||
					got.SSHKeys["ed25519_private"] != string(hk.Private) || got.SSHKeys["ed25519_public"] != hk.Public || len(got.SSHKeys) != 2 {
					t.Errorf("host key: ssh_deletekeys %v, ssh_genkeytypes %v, ssh_keys names %d entries; want the image's keys deleted, none made, and this key only",
						got.DeleteKeys, got.GenKeyTypes, len(got.SSHKeys))
				}
			} else if got.DeleteKeys || got.GenKeyTypes != nil || got.SSHKeys != nil {
				t.Errorf("no host key given, yet ssh_deletekeys %v, ssh_genkeytypes %v, ssh_keys %d", got.DeleteKeys, got.GenKeyTypes, len(got.SSHKeys))
			}
			if len(tc.h.NTPServers) > 0 {
				servers, _ := got.NTP["servers"].([]any)
				if got.NTP["enabled"] != true || got.NTP["ntp_client"] != "systemd-timesyncd" || len(servers) != 1 || servers[0] != tc.h.NTPServers[0] {
					t.Errorf("ntp %v, want systemd-timesyncd with %v", got.NTP, tc.h.NTPServers)
				}
			} else if got.NTP != nil {
				t.Errorf("ntp %v, want none", got.NTP)
			}

			back, err := Parse(data)
			if err != nil {
				t.Fatal(err)
			}
			if back.Hostname != tc.h.Hostname || !slices.Equal(back.AuthorizedKeys, tc.h.AuthorizedKeys) || !slices.Equal(back.NTPServers, tc.h.NTPServers) ||
				(back.HostKey == nil) != (tc.h.HostKey == nil) || (back.HostKey != nil && (back.HostKey.Public != hk.Public || string(back.HostKey.Private) != string(hk.Private))) {
				t.Errorf("Parse gave %v, want %v", back, tc.h)
			}
			again, err := CloudConfig(back)
			if err != nil || string(again) != string(data) {
				t.Errorf("written again from what Parse read, the user data differs (%v)", err)
			}
		})
	}
}

// TestParseRefuses: Parse refuses what is not its cloud-config, and a
// host key whose halves differ, without quoting the data.
func TestParseRefuses(t *testing.T) {
	a, err := sshkeys.Generate(nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := sshkeys.Generate(nil)
	if err != nil {
		t.Fatal(err)
	}
	mixed, err := CloudConfig(Host{Hostname: "m0", HostKey: &sshkeys.KeyPair{Private: a.Private, Public: b.Public}})
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{
		"no header":    []byte("hostname: m0\n"),
		"not YAML":     []byte("#cloud-config\n: [\n"),
		"bad key":      []byte("#cloud-config\nssh_keys:\n  ed25519_private: not-a-key\n"),
		"mixed halves": mixed,
	} {
		if _, err := Parse(data); err == nil {
			t.Errorf("%s: Parse took it", name)
		} else if strings.Contains(err.Error(), "PRIVATE KEY") || strings.Contains(err.Error(), "not-a-key") {
			t.Errorf("%s: the error quotes the data: %v", name, err)
		}
	}
}
