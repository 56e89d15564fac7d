package kubeadm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const cert = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUQ2Fr\n-----END CERTIFICATE-----\n"

func TestTorn(t *testing.T) {
	tests := []struct {
		name, file, data string
		want             string // "" = whole
	}{
		{"a whole certificate", "pki/ca.crt", cert, ""},
		{"an empty certificate", "pki/ca.crt", "", "empty"},
		{"a certificate cut short", "pki/ca.crt", cert[:40], "not whole PEM"},
		{"a key with NULs after it", "pki/ca.key", cert + "\x00\x00\x00", "NUL bytes"},
		{"a key with garbage after it", "pki/ca.key", cert + "MIIB", "not whole PEM"},
		{"a whole kubeconfig", "admin.conf", "apiVersion: v1\nkind: Config\n", ""},
		{"an empty kubeconfig", "admin.conf", "", "empty"},
		{"a kubeconfig cut inside a quote", "admin.conf", "apiVersion: v1\nclusters:\n- cluster: {server: \"https://", "not YAML"},
		{"a manifest of zero bytes", "manifests/etcd.yaml", "", "empty"},
		{"a manifest of NULs (delayed allocation)", "manifests/etcd.yaml", "\x00\x00\x00\x00", "NUL bytes"},
		{"an env file of NULs", "kubeadm-flags.env", "\x00\x00", "NUL bytes"},
		{"another file, not empty", "kubeadm-flags.env", "KUBELET_KUBEADM_ARGS=\"\"\n", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, tc.file)
			os.MkdirAll(filepath.Dir(p), 0o755)
			if err := os.WriteFile(p, []byte(tc.data), 0o600); err != nil {
				t.Fatal(err)
			}
			bad, err := Torn(dir, filepath.Join(dir, "missing"))
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.want == "" && len(bad) > 0:
				t.Errorf("whole file reported: %v", bad)
			case tc.want != "" && (len(bad) != 1 || !strings.Contains(bad[0], p) || !strings.Contains(bad[0], tc.want)):
				t.Errorf("got %v, want %s (%s)", bad, p, tc.want)
			}
		})
	}
}
