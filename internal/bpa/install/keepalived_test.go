package install

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestControlPlaneVIP: with a VIP, init makes it the controlPlaneEndpoint
// and a name in the API server's certificate, flannel reaches the API
// there, and each master's install sets up keepalived to hold it (the
// first master above the others), while a worker's, or any host's without
// a VIP, has no keepalived.
func TestControlPlaneVIP(t *testing.T) {
	c := testConfig()
	const vip = "172.22.0.100"
	cl := Cluster{Name: "edge", Endpoint: "172.22.0.50", PodSubnet: DefaultPodSubnet, Plugins: []string{PluginFlannel},
		VIP: vip, FirstMaster: "node-0"}

	initS, err := InitScript(c, cl, "node-0", "172.22.0.50")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"controlPlaneEndpoint: " + vip + ":6443", "certSANs:\n    - " + vip + "\n    - 172.22.0.50\n"} {
		if !strings.Contains(initS, want) {
			t.Errorf("init script lacks %q:\n%s", want, initS)
		}
	}
	fl, err := PluginManifest(c, cl, PluginFlannel)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(fl, "- name: KUBERNETES_SERVICE_HOST\n          value: \""+vip+"\"") {
		t.Errorf("flannel does not reach the API at the VIP:\n%s", fl)
	}
	// A join discovers the cluster through the master the BPA names.
	js, err := JoinScript(cl, "node-1", "172.22.0.51", true, Join{Token: "abcdef.0123456789abcdef", CACertHash: "sha256:00", CertificateKey: "00"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(js, "apiServerEndpoint: 172.22.0.50:6443") {
		t.Errorf("join does not discover through the master at 172.22.0.50:\n%s", js)
	}

	prio := regexp.MustCompile(`\n\tpriority (\d+)\n`)
	for _, h := range []struct {
		name, addr string
		master     bool
		vip        string
		want       string // the VRRP priority; "" for no keepalived
	}{
		{"node-0", "172.22.0.50", true, vip, "150"},
		{"node-1", "172.22.0.51", true, vip, "100"},
		{"node-2", "172.22.0.52", false, vip, ""},
		{"node-0", "172.22.0.50", true, "", ""},
	} {
		cl := cl
		cl.VIP = h.vip
		s, err := InstallScript(c, cl, Target{Name: h.name, Address: h.addr, Master: h.master, EncryptionKey: testKey})
		if err != nil {
			t.Fatal(err)
		}
		bashSyntax(t, "install "+h.name, s)
		m := prio.FindStringSubmatch(s)
		switch {
		case h.want == "" && (m != nil || strings.Contains(s, "keepalived")):
			t.Errorf("%s (master %v, VIP %q) sets up keepalived:\n%s", h.name, h.master, h.vip, s)
		case h.want != "" && (m == nil || m[1] != h.want):
			t.Errorf("%s: VRRP priority %v, want %s:\n%s", h.name, m, h.want, s)
		case h.want != "":
			for _, want := range []string{"-v a='" + h.addr + "'", "\t\t" + vip + "/$bits dev $dev\n", "router_id " + h.name + "\n",
				"systemctl restart keepalived", "weight -60"} {
				if !strings.Contains(s, want) {
					t.Errorf("%s: install script lacks %q", h.name, want)
				}
			}
		}
	}
	if a, b := VRRPRouterID("edge"), VRRPRouterID("site-a"); a < 1 || a > 255 || a == b {
		t.Errorf("VRRP router IDs %d (edge) and %d (site-a): want two different IDs in 1-255", a, b)
	}
	// The ordering the priorities promise: before init the first master
	// (its API down) beats the others (theirs down too); once they run,
	// a first master provisioned again does not take the VIP from them.
	if !(VRRPFirstPriority-VRRPCheckWeight > VRRPPriority-VRRPCheckWeight && VRRPFirstPriority-VRRPCheckWeight < VRRPPriority) {
		t.Errorf("priorities %d/%d and weight %d do not order the masters as keepalivedConfig says", VRRPFirstPriority, VRRPPriority, VRRPCheckWeight)
	}
}

// TestKeepalivedConfigParses: the configuration the install script
// writes, with the shell's $dev and $bits filled in as on a host, is one
// that keepalived itself accepts.
func TestKeepalivedConfigParses(t *testing.T) {
	ka, err := exec.LookPath("keepalived")
	if err != nil {
		t.Fatalf("keepalived is not installed (bash .ci/install-deps installs it): %v", err)
	}
	for _, host := range []string{"node-0", "node-1"} {
		conf, err := keepalivedConfig(Cluster{Name: "edge", VIP: "172.22.0.100", FirstMaster: "node-0"}, host)
		if err != nil {
			t.Fatal(err)
		}
		// The script's here-document, expanded by bash as on the host.
		cmd := exec.Command("bash", "-c", "dev=eth0 bits=24\ncat <<END\n"+conf+"END\n")
		out, err := cmd.Output()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(out), "$") || !strings.Contains(string(out), "172.22.0.100/24 dev eth0") {
			t.Fatalf("the expanded configuration:\n%s", out)
		}
		f := filepath.Join(t.TempDir(), "keepalived.conf")
		if err := os.WriteFile(f, out, 0o600); err != nil {
			t.Fatal(err)
		}
		log := filepath.Join(t.TempDir(), "config-test.log")
		if res, err := exec.Command(ka, "--config-test="+log, "--use-file", f).CombinedOutput(); err != nil {
			b, _ := os.ReadFile(log)
			t.Errorf("%s: keepalived --config-test: %v\n%s%s\n%s", host, err, res, b, out)
		}
	}
}
