package containerd

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	p := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(p, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file:\n%s", name, got)
	}
}

func hostConfig() Config {
	return Config{
		Root: "/var/lib/bootstick/containerd", State: "/run/bootstick/containerd",
		Address: "/run/bootstick/containerd/containerd.sock", HostsDir: "/etc/bootstick/containerd/hosts.d",
		SandboxImage: "registry.example/pause:3.10.1", RestrictOOMScoreAdj: true,
		CNIBinDir: "/usr/lib/cni", CNIConfDir: "/etc/cni/net.d",
	}
}

func TestRender(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Config)
	}{
		{"host-mode.toml", func(*Config) {}},
		{"appliance.toml", func(c *Config) { c.RestrictOOMScoreAdj, c.SystemdCgroup = false, true }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := hostConfig()
			tt.mutate(&c)
			got, err := Render(c)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, tt.name, got)
		})
	}
}

func TestRenderRejects(t *testing.T) {
	c := hostConfig()
	c.Address, c.SandboxImage = "", ""
	if _, err := Render(c); err == nil || !strings.Contains(err.Error(), "Address, SandboxImage not set") {
		t.Errorf("err = %v", err)
	}
	c = hostConfig()
	c.Root = "relative"
	if _, err := Render(c); err == nil || !strings.Contains(err.Error(), "Root") {
		t.Errorf("err = %v", err)
	}
}

func TestHostsFiles(t *testing.T) {
	files, err := HostsFiles([]string{"registry.example", "other.example:5000"}, []string{"http://127.0.0.1:5000", "http://192.0.2.10:5000"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	if strings.Join(names, " ") != "other.example:5000/hosts.toml registry.example/hosts.toml" {
		t.Errorf("files %v", names)
	}
	golden(t, "hosts.toml", files["registry.example/hosts.toml"])

	for _, bad := range []struct {
		regs, mirrors []string
	}{
		{[]string{"a/b"}, []string{"http://127.0.0.1:5000"}},
		{[]string{"ok.example"}, nil},
		{[]string{"ok.example"}, []string{"127.0.0.1:5000"}},
		{[]string{"ok.example"}, []string{"http://127.0.0.1:5000/v2"}},
	} {
		if _, err := HostsFiles(bad.regs, bad.mirrors); err == nil {
			t.Errorf("HostsFiles(%v, %v) succeeded", bad.regs, bad.mirrors)
		}
	}
}

func TestNeedsRestrict(t *testing.T) {
	tests := []struct {
		status string
		want   bool
		err    bool
	}{
		{"Name:\tx\nCapEff:\t000001ffffffffff\n", false, false},
		{"CapEff:\t000001fffeffffff\n", true, false}, // these machines: no CAP_SYS_RESOURCE
		{"CapEff:\t0000000000000000\n", true, false},
		{"CapEff:\tzz\n", false, true},
		{"Name:\tx\n", false, true},
	}
	for _, tt := range tests {
		got, err := needsRestrict(strings.NewReader(tt.status))
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("needsRestrict(%q) = %v, %v", tt.status, got, err)
		}
	}
	if _, err := NeedsRestrictOOMScoreAdj(); err != nil {
		t.Errorf("on this host: %v", err)
	}
}

func TestWriteFiles(t *testing.T) {
	dir := t.TempDir()
	c := HostPaths(filepath.Join(dir, "data"), filepath.Join(dir, "run"), filepath.Join(dir, "etc"))
	c.SandboxImage = "registry.example/pause:3.10.1"
	os.MkdirAll(filepath.Join(c.HostsDir, "stale.example"), 0o755)
	hosts, _ := HostsFiles([]string{"registry.example"}, []string{"http://127.0.0.1:5000"})
	cfg := filepath.Join(dir, "etc", "containerd", "config.toml")
	if err := WriteFiles(cfg, c, hosts); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(cfg); err != nil || !strings.Contains(string(data), c.Address) {
		t.Errorf("config.toml: %v\n%s", err, data)
	}
	if _, err := os.Stat(filepath.Join(c.HostsDir, "registry.example", "hosts.toml")); err != nil {
		t.Error(err)
	}
	if _, err := os.Stat(filepath.Join(c.HostsDir, "stale.example")); err == nil {
		t.Error("a stale registry folder was kept")
	}
	if strings.HasPrefix(c.Address, "/run/containerd/") {
		t.Error("host mode must never use the host's own containerd socket")
	}
}
