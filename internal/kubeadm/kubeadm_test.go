package kubeadm

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bootstick/bootstick/internal/cas"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func nodeConfig() Config {
	return Config{
		KubernetesVersion: "v1.34.4", NodeName: "ilc", AdvertiseAddress: "192.0.2.10",
		PodSubnet: "10.244.0.0/16", ServiceSubnet: "10.96.0.0/12",
		CRISocket:       "unix:///run/bootstick/containerd/containerd.sock",
		ImageRepository: "registry.example", EtcdImageTag: "3.6.5-0", CoreDNSImageTag: "v1.12.1",
		EtcdDataDir:          "/var/lib/bootstick/etcd",
		EncryptionConfigPath: "/var/lib/bootstick/encryption/config.yaml",
		CgroupDriver:         CgroupDriver(false),
	}
}

func TestRenderGolden(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Config)
	}{
		{"host-cgroupfs.yaml", func(*Config) {}},
		{"appliance-systemd.yaml", func(c *Config) {
			c.CgroupDriver = CgroupDriver(true)
			c.EtcdImageTag, c.CoreDNSImageTag = "", ""
			c.CertSANs = []string{"ilc.example"}
			c.PatchesDir = "/etc/bootstick/kubeadm-patches"
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := nodeConfig()
			tt.mutate(&c)
			got, err := Render(c)
			if err != nil {
				t.Fatal(err)
			}
			p := filepath.Join("testdata", tt.name)
			if *update {
				os.WriteFile(p, got, 0o644)
			}
			want, err := os.ReadFile(p)
			if err != nil {
				t.Fatalf("%v (run with -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("differs from %s:\n%s", p, got)
			}
		})
	}
}

func TestRenderRejectsEveryProblem(t *testing.T) {
	c := nodeConfig()
	c.KubernetesVersion, c.AdvertiseAddress, c.PodSubnet, c.CgroupDriver, c.CRISocket, c.EtcdDataDir =
		"1.34.4", "node1", "10.244.0.0", "systemd-ish", "/run/x.sock", "etcd"
	_, err := Render(c)
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"must start with v", `AdvertiseAddress "node1"`, `PodSubnet "10.244.0.0"`, `CgroupDriver "systemd-ish"`, "unix:// URL", `EtcdDataDir "etcd"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
}

func TestEnsureEncryptionConfig(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "encryption", "config.yaml")
	created, err := EnsureEncryptionConfig(p)
	if err != nil || !created {
		t.Fatalf("first call: created=%v err=%v", created, err)
	}
	fi, _ := os.Stat(p)
	di, _ := os.Stat(filepath.Dir(p))
	if fi.Mode().Perm() != 0o600 || di.Mode().Perm() != 0o700 {
		t.Errorf("modes: file %v, folder %v; want 0600 and 0700", fi.Mode().Perm(), di.Mode().Perm())
	}
	first, _ := os.ReadFile(p)
	if err := checkEncryptionConfig(first); err != nil {
		t.Errorf("the written config does not check: %v", err)
	}
	// A second call keeps the key.
	created, err = EnsureEncryptionConfig(p)
	if err != nil || created {
		t.Fatalf("second call: created=%v err=%v", created, err)
	}
	if second, _ := os.ReadFile(p); !bytes.Equal(first, second) {
		t.Error("the key changed on a second call")
	}
	// Another call elsewhere makes another key.
	other := filepath.Join(dir, "other.yaml")
	EnsureEncryptionConfig(other)
	if o, _ := os.ReadFile(other); bytes.Equal(o, first) {
		t.Error("two keys are equal")
	}

	for _, tt := range []struct{ name, content, want string }{
		{"identity first", "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n  - identity: {}\n  - secretbox: {keys: [{name: k, secret: SECRETVALUE}]}\n", "unencrypted"},
		{"not yaml", "SECRETVALUE: [", "not valid YAML"},
		{"no secrets", "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources: []\n", "does not cover secrets"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bad := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "-")+".yaml")
			os.WriteFile(bad, []byte(tt.content), 0o600)
			_, err := EnsureEncryptionConfig(bad)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want %q", err, tt.want)
			}
			if err != nil && strings.Contains(err.Error(), "SECRETVALUE") {
				t.Error("the error shows the file's content")
			}
		})
	}
}

// kubeadm itself accepts what Render writes.
func TestKubeadmValidates(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the kubeadm binary from make toolchain")
	}
	kubeadm := filepath.Join(cas.DefaultRoot(), "toolchain", "current", "bin", "kubeadm")
	if _, err := os.Stat(kubeadm); err != nil {
		t.Fatalf("%v: run make toolchain first", err)
	}
	c := nodeConfig()
	data, err := Render(c)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "kubeadm.yaml")
	os.WriteFile(p, data, 0o644)
	out, err := exec.Command(kubeadm, "config", "validate", "--config", p).CombinedOutput()
	if err != nil {
		t.Fatalf("kubeadm config validate: %v\n%s", err, out)
	}
	out, err = exec.Command(kubeadm, "config", "images", "list", "--config", p).CombinedOutput()
	if err != nil {
		t.Fatalf("kubeadm config images list: %v\n%s", err, out)
	}
	for _, want := range []string{"registry.example/kube-apiserver:v1.34.4", "registry.example/etcd:3.6.5-0", "registry.example/coredns:v1.12.1"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("kubeadm would pull\n%s\nwhich lacks %s", out, want)
		}
	}
}
