package install

import (
	"bytes"
	"context"
	"encoding/base64"
	"strings"
	"testing"
)

// testKey is a cluster's encryption key in the tests.
var testKey = bytes.Repeat([]byte{0x5a}, 32)

// TestEncryptionAtRest: a master's install writes the cluster's
// EncryptionConfiguration (its key) beside kubeadm, refusing to replace
// another; init points the API server at it; a worker gets none; a
// master without a key is refused; and the key reads back from the file.
func TestEncryptionAtRest(t *testing.T) {
	c := testConfig()
	cl := Cluster{Name: "edge", Endpoint: "172.22.0.50", PodSubnet: DefaultPodSubnet, Plugins: []string{PluginFlannel}}
	b64 := base64.StdEncoding.EncodeToString(testKey)
	m, err := InstallScript(c, cl, Target{Name: "node-0", Address: "172.22.0.50", Master: true, EncryptionKey: testKey})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"enc='" + EncryptionConfigPath + "'", "secret: " + b64, "- secretbox:", `install -d -m 0700 "$(dirname "$enc")"`,
		`chmod 0600 "$enc.bootstick-new"`, `if [ -e "$enc" ] && ! cmp -s "$enc.bootstick-new" "$enc"; then`} {
		if !strings.Contains(m, want) {
			t.Errorf("a master's install lacks %q", want)
		}
	}
	w, err := InstallScript(c, cl, Target{Name: "node-1", Address: "172.22.0.51"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(w, EncryptionConfigPath) || strings.Contains(w, b64) {
		t.Error("a worker's install carries the cluster's encryption key")
	}
	if _, err := InstallScript(c, cl, Target{Name: "node-0", Address: "172.22.0.50", Master: true}); err == nil || strings.Contains(err.Error(), b64) {
		t.Errorf("a master without a key: %v, want a refusal", err)
	}
	initS, err := InitScript(c, cl, "node-0", "172.22.0.50")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"- name: encryption-provider-config\n      value: /etc/kubernetes/bootstick-encryption/config.yaml",
		"hostPath: /etc/bootstick/encryption\n      mountPath: /etc/kubernetes/bootstick-encryption\n      readOnly: true"} {
		if !strings.Contains(initS, want) {
			t.Errorf("init lacks %q:\n%s", want, initS)
		}
	}
	for _, c := range []struct {
		name, file string
		want       []byte
		err        string
	}{
		{"the cluster's", EncryptionConfig(testKey), testKey, ""},
		{"none", "", nil, ""},
		{"identity first", "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n  - resources: [secrets]\n    providers:\n      - identity: {}\n",
			nil, "Secrets would be stored unencrypted"},
	} {
		got, err := ReadEncryptionKey(context.Background(), answer(c.file))
		if !bytes.Equal(got, c.want) || (err == nil) != (c.err == "") || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%s: ReadEncryptionKey = %x, %v; want %x, %q", c.name, got, err, c.want, c.err)
		}
	}
}
