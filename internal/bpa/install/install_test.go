package install

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/bootstick/bootstick/internal/cas"
)

func testConfig() *Config {
	return &Config{
		KubernetesVersion: "v1.34.4", PackagesURL: "http://172.22.0.1:6180/packages/",
		Debs: []Deb{{Name: "containerd", Version: "1.7.24~ds1-6+deb13u1", File: "containerd_1.7.24~ds1-6+deb13u1_amd64.deb", SHA256: strings.Repeat("a", 64)}},
		Binaries: []Binary{{Name: "kubeadm", SHA256: strings.Repeat("b", 64), Zstd: strings.Repeat("9", 64)}, {Name: "kubelet", SHA256: strings.Repeat("c", 64)}, {Name: "kubectl", SHA256: strings.Repeat("d", 64)}, {Name: "flannel", SHA256: strings.Repeat("e", 64)},
			{Name: "cni-bridge", SHA256: strings.Repeat("4", 64)}, {Name: "cni-host-local", SHA256: strings.Repeat("5", 64)},
			{Name: "cni-portmap", SHA256: strings.Repeat("6", 64)}, {Name: "cni-loopback", SHA256: strings.Repeat("7", 64)},
			{Name: "cni-macvlan", SHA256: strings.Repeat("8", 64)}, {Name: "cni-dhcp", SHA256: strings.Repeat("9", 64)}},
		Registry: "http://172.22.0.1:5000", Mirrored: []string{"docker.io", "registry.k8s.io"},
		PauseImage: "registry.k8s.io/pause:3.10.1",
		Plugins:    map[string]Plugin{PluginFlannel: {Image: "docker.io/flannel/flannel:v0.27.4"}},
		Images: []Image{{Name: "docker.io/flannel/flannel:v0.27.4", Digest: "sha256:" + strings.Repeat("1", 64)},
			{Name: "registry.k8s.io/kube-apiserver:v1.34.4", Digest: "sha256:" + strings.Repeat("2", 64)},
			{Name: "registry.k8s.io/pause:3.10.1", Digest: "sha256:" + strings.Repeat("3", 64)}},
	}
}

// bashSyntax fails the test when bash cannot parse script.
func bashSyntax(t *testing.T, name, script string) {
	t.Helper()
	cmd := exec.Command("bash", "-n")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: bash -n: %v\n%s\n%s", name, err, out, script)
	}
}

// TestScripts: every script parses, points containerd at the stick's
// registry for each mirrored name, checks every package's checksum, and
// carries the join secrets only inside the script (never an argument).
func TestScripts(t *testing.T) {
	c := testConfig()
	cl := Cluster{Name: "edge", Endpoint: "172.22.0.50", PodSubnet: DefaultPodSubnet, Plugins: []string{PluginFlannel}}
	inst, err := InstallScript(c, cl, Target{Name: "node-0", Address: "172.22.0.50", Master: true, EncryptionKey: testKey})
	if err != nil {
		t.Fatal(err)
	}
	bashSyntax(t, "install", inst)
	for _, want := range []string{
		"write /etc/containerd/certs.d/registry.k8s.io/hosts.toml", "write /etc/containerd/certs.d/docker.io/hosts.toml",
		`"http://172.22.0.1:5000"`, "fetchz 'kubeadm' " + strings.Repeat("b", 64) + " " + strings.Repeat("9", 64), "fetch 'kubelet' " + strings.Repeat("c", 64), "fetch 'containerd_1.7.24~ds1-6+deb13u1_amd64.deb' " + strings.Repeat("a", 64),
		"put \"$dir/\"'flannel' '/opt/cni/bin/flannel' 0755\n", "put \"$dir/\"'kubeadm' '/usr/bin/kubeadm' 0755\n",
		"put \"$dir/\"'cni-bridge' '/opt/cni/bin/bridge' 0755\n", "put \"$dir/\"'cni-macvlan' '/opt/cni/bin/macvlan' 0755\n", `"type": "flannel"`, `sandbox_image = "registry.k8s.io/pause:3.10.1"`, "SystemdCgroup = true",
		// The dhcp plugin's daemon, started by its socket.
		"write /etc/systemd/system/cni-dhcp.socket <<'END'\n", "ListenStream=/run/cni/dhcp.sock\n", "ExecStart=/opt/cni/bin/dhcp daemon\n",
		"systemctl enable --now cni-dhcp.socket",
		// Every image by the lock's digest, then named by its tag.
		"pull 'registry.k8s.io/kube-apiserver@sha256:" + strings.Repeat("2", 64) + "' 'registry.k8s.io/kube-apiserver:v1.34.4'\n",
		"pull 'registry.k8s.io/pause@sha256:" + strings.Repeat("3", 64) + "' 'registry.k8s.io/pause:3.10.1'\n",
		"pull 'docker.io/flannel/flannel@sha256:" + strings.Repeat("1", 64) + "' 'docker.io/flannel/flannel:v0.27.4'\n",
	} {
		if !strings.Contains(inst, want) {
			t.Errorf("install script lacks %q", want)
		}
	}
	// A stick without the dhcp plugin starts no daemon for it.
	noDHCP := testConfig()
	noDHCP.Binaries = slices.DeleteFunc(noDHCP.Binaries, func(b Binary) bool { return b.Name == "cni-dhcp" })
	if s, err := InstallScript(noDHCP, cl, Target{Name: "node-0", Address: "172.22.0.50", Master: true, EncryptionKey: testKey}); err != nil || strings.Contains(s, "cni-dhcp") {
		t.Errorf("a stick without the dhcp plugin: the install script names cni-dhcp (%v)", err)
	}
	initS, err := InitScript(c, cl, "node-0", "172.22.0.50")
	if err != nil {
		t.Fatal(err)
	}
	bashSyntax(t, "init", initS)
	for _, want := range []string{"podSubnet: 10.128.0.0/16", "value: 172.22.0.50", "controlPlaneEndpoint: 172.22.0.50:6443", "kubernetesVersion: v1.34.4", "name: node-0", "--skip-token-print",
		"- name: election-timeout", `value: "5000"`, "controllerManager:\n  extraArgs:\n    - name: leader-elect-lease-duration\n      value: 2m17s",
		"scheduler:\n  extraArgs:\n    - name: leader-elect-lease-duration\n      value: 2m17s",
		"patches:\n  directory: /etc/bootstick/kubeadm-patches\n",
		"cat >'/etc/bootstick/kubeadm-patches'/'kube-apiserver+strategic.yaml' <<'END'\nspec:\n  containers:\n  - name: kube-apiserver\n    livenessProbe:\n      failureThreshold: 30\n    readinessProbe:\n      periodSeconds: 10\nEND\n",
		"cat >'/etc/bootstick/kubeadm-patches'/'kube-scheduler+strategic.yaml' <<'END'\nspec:\n  containers:\n  - name: kube-scheduler\n    readinessProbe:\n      periodSeconds: 10\nEND\n",
		"cat >'/etc/bootstick/kubeadm-patches'/'etcd+strategic.yaml' <<'END'\nspec:\n  containers:\n  - name: etcd\n    livenessProbe:\n      failureThreshold: 30\nEND\n"} {
		if !strings.Contains(initS, want) {
			t.Errorf("init script lacks %q", want)
		}
	}
	j := Join{Token: "abcdef.0123456789abcdef", CACertHash: "sha256:" + strings.Repeat("f", 64), CertificateKey: strings.Repeat("1a", 32)}
	for _, master := range []bool{false, true} {
		js, err := JoinScript(cl, "node-1", "172.22.0.51", master, j)
		if err != nil {
			t.Fatal(err)
		}
		bashSyntax(t, "join", js)
		if !strings.Contains(js, "token: abcdef.0123456789abcdef") || strings.Contains(js, "kubeadm join --token") {
			t.Errorf("the token must be in the join file, never an argument:\n%s", js)
		}
		if master != strings.Contains(js, "certificateKey: "+j.CertificateKey) {
			t.Errorf("master=%v: certificate key wrongly present or missing", master)
		}
		// A master's etcd and API server ride out a stall as the first's.
		if master != (strings.Contains(js, "patches:\n  directory: /etc/bootstick/kubeadm-patches\n") && strings.Contains(js, "failureThreshold: 30\n")) {
			t.Errorf("master=%v: kubeadm's patches wrongly present or missing:\n%s", master, js)
		}
	}
	m, err := PluginManifest(c, cl, PluginFlannel)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(m, "image: docker.io/flannel/flannel@sha256:"+strings.Repeat("1", 64)+"\n") || !strings.Contains(m, `"Network": "10.128.0.0/16"`) ||
		!strings.Contains(m, `value: "172.22.0.50"`) {
		t.Errorf("flannel manifest:\n%s", m)
	}
	if _, err := PluginManifest(c, cl, "multus"); err == nil || !strings.Contains(err.Error(), `"multus" is not on this stick`) {
		t.Errorf("an unknown plugin: %v", err)
	}
	if got := c.UnknownPlugins([]string{"flannel", "multus", "ovn4nfv"}); strings.Join(got, ",") != "multus,ovn4nfv" {
		t.Errorf("UnknownPlugins = %v", got)
	}
}

func TestRedact(t *testing.T) {
	in := "error: token abcdef.0123456789abcdef rejected; key " + strings.Repeat("9a", 32) + " bad; password hunter2"
	got := Redact(in, "hunter2")
	for _, s := range []string{"abcdef.0123456789abcdef", strings.Repeat("9a", 32), "hunter2"} {
		if strings.Contains(got, s) {
			t.Errorf("Redact left %q in %q", s, got)
		}
	}
	if !strings.Contains(got, "rejected") {
		t.Errorf("Redact dropped the words: %q", got)
	}
}

// TestCACertHash hashes a fixed CA certificate (testdata/ca.crt) and
// compares with the hash kubeadm's documentation computes for it with
// openssl, which kubeadm join's --discovery-token-ca-cert-hash takes:
//
//	openssl x509 -pubkey -in ca.crt | openssl pkey -pubin -outform der | sha256sum
func TestCACertHash(t *testing.T) {
	const want = "sha256:d0c120d71445b79d6437b20b8e181439f6e668f5de75f0530a6a1e65ce818208"
	ca, err := os.ReadFile(filepath.Join("testdata", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := CACertHash(ca); err != nil || got != want {
		t.Errorf("CACertHash = %s, %v; want %s (openssl's)", got, err, want)
	}
	if _, err := CACertHash([]byte("not pem")); err == nil {
		t.Error("a non-PEM CA was accepted")
	}
}

func TestParseConfig(t *testing.T) {
	data, err := testConfig().Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseConfig(data); err != nil {
		t.Fatal(err)
	}
	_, err = ParseConfig(`{"kubernetesVersion": "v1.34.4", "packagesURL": "http://x/packages", "surprise": 1}`)
	if err == nil || !strings.Contains(err.Error(), `unknown field "surprise"`) {
		t.Errorf("unknown field: %v", err)
	}
	_, err = ParseConfig(`{"kubernetesVersion": "v1.34.4", "packagesURL": "http://x/packages"}`)
	for _, want := range []string{"packagesURL must end in /", "binaries lacks kubeadm", "registry is empty", "run the site step again"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	// flannel hands each pod to the reference plugins: a stick that
	// carries neither them nor Debian's .deb of them is refused.
	c := testConfig()
	c.Binaries = slices.DeleteFunc(c.Binaries, func(b Binary) bool { return b.Name == "cni-portmap" || b.Name == "cni-loopback" })
	data, err = c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	_, err = ParseConfig(data)
	for _, want := range []string{"binaries lacks cni-portmap (flannel hands each pod to the portmap plugin)", "binaries lacks cni-loopback"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	c.Debs = append(c.Debs, Deb{Name: "containernetworking-plugins", Version: "1.1.1+ds1-3+b17", File: "containernetworking-plugins_1.1.1+ds1-3+b17_amd64.deb", SHA256: strings.Repeat("0", 64)})
	if data, err = c.Marshal(); err != nil {
		t.Fatal(err)
	}
	if _, err := ParseConfig(data); err != nil {
		t.Errorf("with Debian's plugins: %v", err)
	}

	// Images: each by a tagged name and a sha256 digest, the sandbox's and
	// every plugin's among them.
	c = testConfig()
	c.Images = []Image{{Name: "registry.k8s.io/pause", Digest: "sha256:" + strings.Repeat("3", 64)},
		{Name: "registry.k8s.io/etcd:3.6.5-0", Digest: "latest"}}
	data, err = c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	_, err = ParseConfig(data)
	for _, want := range []string{`images[0].name "registry.k8s.io/pause" is not registry/repository:tag`,
		`images[1].digest "latest" is not sha256:<64 hex>`, "images lacks the pause image registry.k8s.io/pause:3.10.1",
		"images lacks plugin flannel's image docker.io/flannel/flannel:v0.27.4"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
}

// TestMastersOnlyUntainted: a master the cluster names schedulable gets
// kubeadm's empty taint list at init and at a control-plane join, so it
// runs workloads; any other master keeps kubeadm's default (the
// control-plane taint), and a worker has no taint list at all.
func TestMastersOnlyUntainted(t *testing.T) {
	c := testConfig()
	cl := Cluster{Name: "edge", Endpoint: "172.22.0.50", PodSubnet: DefaultPodSubnet, Schedulable: map[string]bool{"node-0": true, "node-1": true}}
	const untainted = "  taints: []\n"
	initS, err := InitScript(c, cl, "node-0", "172.22.0.50")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(initS, "InitConfiguration\nnodeRegistration:\n") || !strings.Contains(initS, untainted) {
		t.Errorf("the schedulable first master keeps kubeadm's taint:\n%s", initS)
	}
	j := Join{Token: "abcdef.0123456789abcdef", CACertHash: "sha256:" + strings.Repeat("f", 64), CertificateKey: strings.Repeat("1a", 32)}
	for _, c := range []struct {
		host   string
		master bool
		want   bool
	}{{"node-1", true, true}, {"node-2", true, false}, {"node-3", false, false}} {
		js, err := JoinScript(cl, c.host, "172.22.0.51", c.master, j)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(js, untainted); got != c.want {
			t.Errorf("%s (master %v): empty taint list %v, want %v:\n%s", c.host, c.master, got, c.want, js)
		}
		if strings.Contains(js, "taints:") != c.want {
			t.Errorf("%s: a taint list where kubeadm's default should hold:\n%s", c.host, js)
		}
	}
	cl.Schedulable = nil
	if initS, _ := InitScript(c, cl, "node-0", "172.22.0.50"); strings.Contains(initS, "taints:") {
		t.Errorf("a master of a cluster with workers is untainted:\n%s", initS)
	}
}

// TestKubeadmTakesInitAndJoin: the real kubeadm (make toolchain) accepts
// the configurations the init and a master's join write, the folder of
// patches included.
func TestKubeadmTakesInitAndJoin(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the kubeadm binary from make toolchain")
	}
	kubeadm := filepath.Join(cas.DefaultRoot(), "toolchain", "current", "bin", "kubeadm")
	if _, err := os.Stat(kubeadm); err != nil {
		t.Fatalf("%v: run make toolchain first", err)
	}
	cl := Cluster{Name: "edge", Endpoint: "172.22.0.50", PodSubnet: DefaultPodSubnet, Plugins: []string{PluginFlannel}}
	initS, err := InitScript(testConfig(), cl, "node-0", "172.22.0.50")
	if err != nil {
		t.Fatal(err)
	}
	joinS, err := JoinScript(cl, "node-1", "172.22.0.51", true, Join{Token: "abcdef.0123456789abcdef",
		CACertHash: "sha256:" + strings.Repeat("f", 64), CertificateKey: strings.Repeat("1a", 32)})
	if err != nil {
		t.Fatal(err)
	}
	for name, cfg := range map[string]string{
		"init": heredoc(t, initS, "cat >/etc/bootstick/kubeadm.yaml <<'END'\n"),
		"join": heredoc(t, joinS, "cat >/etc/bootstick/join.yaml <<'END'\n"),
	} {
		p := filepath.Join(t.TempDir(), name+".yaml")
		if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(kubeadm, "config", "validate", "--config", p).CombinedOutput(); err != nil {
			t.Errorf("kubeadm config validate of the %s configuration: %v\n%s\n%s", name, err, out, cfg)
		}
	}
}

// heredoc is the here-document of script that starts after the line start.
func heredoc(t *testing.T, script, start string) string {
	t.Helper()
	_, rest, ok := strings.Cut(script, start)
	body, _, ok2 := strings.Cut(rest, "\nEND\n")
	if !ok || !ok2 {
		t.Fatalf("no here-document after %q in:\n%s", start, script)
	}
	return body + "\n"
}

// TestBinaryPath: a host runs flannel's CNI plugin and each reference
// plugin (cni-NAME on the stick) from /opt/cni/bin, as containerd looks
// for them, and the rest from /usr/bin.
func TestBinaryPath(t *testing.T) {
	for name, want := range map[string]string{"kubeadm": "/usr/bin/kubeadm", "flannel": "/opt/cni/bin/flannel",
		"cni-bridge": "/opt/cni/bin/bridge", "cni-host-local": "/opt/cni/bin/host-local"} {
		if got := (Binary{Name: name}).Path(); got != want {
			t.Errorf("%s: %s, want %s", name, got, want)
		}
	}
}
