package hostnet

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

const siteFile = `apiVersion: bootstick.dev/v1alpha1
kind: Site
bootstrap:
  provisioning:
    interface: ens17
    address: 172.22.0.1/24
    dhcpRange: {start: 172.22.0.10, end: 172.22.0.100}
  external:
    interface: ens16
    address: 10.0.2.15/24
    gateway: 10.0.2.2
  dataDisk: /dev/vda
  dns: [10.0.2.3]
hosts:
- name: master-0
  bmc:
    credentials:
      encryptedPassword: |
        -----BEGIN AGE ENCRYPTED FILE-----
        -----END AGE ENCRYPTED FILE-----
sshAuthorizedKeys:
- ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGJvb3RzdGljay1leGFtcGxlLWtleS1ub3QtcmVhbDAw admin@example
`

func TestFromSite(t *testing.T) {
	c, err := FromSite("site.yaml", []byte(siteFile))
	if err != nil {
		t.Fatal(err)
	}
	got := Commands(c)
	want := [][]string{
		{"link", "set", "dev", "ens17", "up"},
		{"addr", "replace", "172.22.0.1/24", "dev", "ens17"},
		{"link", "set", "dev", "ens16", "up"},
		{"addr", "replace", "10.0.2.15/24", "dev", "ens16"},
		{"route", "replace", "default", "via", "10.0.2.2", "dev", "ens16"},
	}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("commands\n%q\nwant\n%q", got, want)
	}
	if len(c.AuthorizedKeys) != 1 || !slices.Equal(c.DNS, []string{"10.0.2.3"}) {
		t.Errorf("config %+v", c)
	}
}

// TestNoRouter: a site with no gateway (no external network, or one with
// no router) gets a default route onto the provisioning network, below any
// other default route; a site with a gateway gets none.
func TestNoRouter(t *testing.T) {
	for _, tc := range []struct {
		name, bootstrap string
		want            [][]string
	}{
		{"no external network", "{provisioning: {interface: ens17, address: 172.22.0.1/24}}", [][]string{
			{"link", "set", "dev", "ens17", "up"},
			{"addr", "replace", "172.22.0.1/24", "dev", "ens17"},
			{"route", "replace", "default", "dev", "ens17", "metric", "4096"},
		}},
		{"an external network with no gateway", "{provisioning: {interface: ens17, address: 172.22.0.1/24}, external: {interface: ens16, address: 10.0.0.2/24}}", [][]string{
			{"link", "set", "dev", "ens17", "up"},
			{"addr", "replace", "172.22.0.1/24", "dev", "ens17"},
			{"link", "set", "dev", "ens16", "up"},
			{"addr", "replace", "10.0.0.2/24", "dev", "ens16"},
			{"route", "replace", "default", "dev", "ens17", "metric", "4096"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := FromSite("site.yaml", []byte("bootstrap: "+tc.bootstrap+"\n"))
			if err != nil {
				t.Fatal(err)
			}
			if !c.NoRouter() {
				t.Errorf("NoRouter() = false for %s", tc.bootstrap)
			}
			if got := Commands(c); !slices.EqualFunc(got, tc.want, slices.Equal) {
				t.Errorf("commands\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
	if c, err := FromSite("site.yaml", []byte(siteFile)); err != nil || c.NoRouter() {
		t.Errorf("a site with a gateway: NoRouter() true (%v)", err)
	}
}

func TestFromSiteBad(t *testing.T) {
	tests := []struct{ name, data, want string }{
		{"not yaml", "bootstrap: [", "reading site"},
		{"no provisioning", "bootstrap: {}\n", "bootstrap.provisioning needs interface and address"},
		{"bad address", "bootstrap: {provisioning: {interface: eth0, address: 172.22.0.1}}\n", `address "172.22.0.1"`},
		{"bad gateway", "bootstrap: {provisioning: {interface: eth0, address: 172.22.0.1/24}, external: {interface: eth1, address: 10.0.0.2/24, gateway: nope}}\n", `gateway "nope"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := FromSite("s.yaml", []byte(tc.data))
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "s.yaml") {
				t.Errorf("error %v, want %q naming the file", err, tc.want)
			}
		})
	}
}

func TestMergeAuthorizedKeys(t *testing.T) {
	tests := []struct {
		name, old string
		keys      []string
		want      string
	}{
		{"empty", "", nil, ""},
		{"new", "", []string{"ssh-ed25519 AAAA a"}, "ssh-ed25519 AAAA a\n"},
		{"kept and deduplicated", "ssh-rsa BBBB b\n\n", []string{"ssh-ed25519 AAAA a", "ssh-rsa BBBB b", " ssh-ed25519 AAAA a "}, "ssh-rsa BBBB b\nssh-ed25519 AAAA a\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(MergeAuthorizedKeys([]byte(tc.old), tc.keys)); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// Apply against a fake /sys/class/net and a fake ip: the commands run in
// order, the keys land 0600 in a 0700 folder, a rerun changes nothing, and
// a missing interface is named with the ones that exist.
func TestApply(t *testing.T) {
	dir := t.TempDir()
	sys := filepath.Join(dir, "sys")
	for _, n := range []string{"lo", "ens16", "ens17"} {
		os.MkdirAll(filepath.Join(sys, n), 0o755)
	}
	log := filepath.Join(dir, "ip.log")
	ip := filepath.Join(dir, "ip")
	os.WriteFile(ip, []byte("#!/bin/sh\necho \"$@\" >> "+log+"\n"), 0o755)
	c, err := FromSite("site.yaml", []byte(siteFile))
	if err != nil {
		t.Fatal(err)
	}
	o := Options{IP: ip, SysNet: sys, RootSSH: filepath.Join(dir, "root", ".ssh"), ResolvConf: filepath.Join(dir, "resolv.conf"), Wait: time.Second}
	for range 2 {
		if err := Apply(context.Background(), c, o); err != nil {
			t.Fatal(err)
		}
	}
	keys, err := os.ReadFile(filepath.Join(o.RootSSH, "authorized_keys"))
	if err != nil || strings.Count(string(keys), "ssh-ed25519") != 1 {
		t.Errorf("authorized_keys %q, %v", keys, err)
	}
	if fi, _ := os.Stat(filepath.Join(o.RootSSH, "authorized_keys")); fi == nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("authorized_keys mode %v", fi)
	}
	if fi, _ := os.Stat(o.RootSSH); fi == nil || fi.Mode().Perm() != 0o700 {
		t.Errorf(".ssh mode %v", fi)
	}
	ran, _ := os.ReadFile(log)
	if lines := strings.Split(strings.TrimSpace(string(ran)), "\n"); len(lines) != 10 || lines[4] != "route replace default via 10.0.2.2 dev ens16" {
		t.Errorf("ip ran:\n%s", ran)
	}
	if r, _ := os.ReadFile(o.ResolvConf); !strings.Contains(string(r), "nameserver 10.0.2.3\n") {
		t.Errorf("resolv.conf %q", r)
	}

	os.RemoveAll(filepath.Join(sys, "ens17"))
	err = Apply(context.Background(), c, o)
	if err == nil || !strings.Contains(err.Error(), "interface ens17 did not appear") || !strings.Contains(err.Error(), "ens16, lo") {
		t.Errorf("missing interface: %v", err)
	}
}
