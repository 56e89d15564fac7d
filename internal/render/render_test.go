package render

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	metal3 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	"go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"

	"github.com/bootstick/bootstick/internal/bpa/install"
	bpa "github.com/bootstick/bootstick/internal/bpa/v1alpha1"
	"github.com/bootstick/bootstick/internal/osimage"
	"github.com/bootstick/bootstick/internal/site"
	"github.com/bootstick/bootstick/internal/sshkeys"
	"github.com/bootstick/bootstick/internal/userdata"
)

var update = flag.Bool("update", false, "rewrite the golden files")

var testImages = []osimage.Image{{Name: "ubuntu-22.04", File: "ubuntu-22.04.qcow2", SHA256: strings.Repeat("5e", 32), Format: "qcow2"},
	{Name: "debian-13-compute", File: "debian-13-compute.qcow2", SHA256: strings.Repeat("d1", 32), Format: "qcow2"}}

func testKey(t testing.TB) *sshkeys.KeyPair {
	t.Helper()
	b, err := os.ReadFile("testdata/ssh/id_ed25519")
	if err != nil {
		t.Fatal(err)
	}
	kp, err := sshkeys.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

func renderSite3(t *testing.T) []Object {
	t.Helper()
	s, err := site.Load("testdata/site3.yaml", site.Options{BundledImages: testImages})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Render(s, Options{SSHKey: testKey(t), Images: testImages})
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from %s (go test ./internal/render -update rewrites it):\n%s", path, got)
	}
}

func TestGoldenThreeHosts(t *testing.T) {
	for _, tc := range []struct {
		golden string
		show   bool
	}{{"testdata/site3.golden.yaml", false}, {"testdata/site3.secrets.golden.yaml", true}} {
		t.Run(tc.golden, func(t *testing.T) {
			var buf bytes.Buffer
			if err := WriteYAML(&buf, renderSite3(t), tc.show); err != nil {
				t.Fatal(err)
			}
			golden(t, tc.golden, buf.Bytes())
			// Twice the same.
			var again bytes.Buffer
			if err := WriteYAML(&again, renderSite3(t), tc.show); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf.Bytes(), again.Bytes()) {
				t.Fatal("render is not deterministic")
			}
		})
	}
}

func TestRenderContents(t *testing.T) {
	objs := renderSite3(t)
	var kinds []string
	for _, o := range objs {
		kinds = append(kinds, fmt.Sprintf("%s/%s", o.GetObjectKind().GroupVersionKind().Kind, o.GetName()))
	}
	want := []string{
		"Secret/master-0-bmc-secret", "Secret/master-0-user-data", "BareMetalHost/master-0",
		"Secret/worker-0-bmc-secret", "Secret/worker-0-user-data", "Secret/worker-0-network-data", "BareMetalHost/worker-0",
		"Secret/worker-1-bmc-secret", "Secret/worker-1-user-data", "BareMetalHost/worker-1",
		"Provisioning/edge-1", "Secret/bootstick-ssh-key",
	}
	if strings.Join(kinds, " ") != strings.Join(want, " ") {
		t.Fatalf("objects:\n%v\nwant:\n%v", kinds, want)
	}
	byName := map[string]Object{}
	for _, o := range objs {
		byName[o.GetObjectKind().GroupVersionKind().Kind+"/"+o.GetName()] = o
	}
	sec := byName["Secret/worker-1-bmc-secret"].(*corev1.Secret)
	if string(sec.Data["username"]) != "idrac" || string(sec.Data["password"]) != "GoldenFilePW" {
		t.Errorf("worker-1 BMC secret = %q", sec.Data)
	}
	bmh := byName["BareMetalHost/worker-1"].(*metal3.BareMetalHost)
	if bmh.Spec.BMC.Address != "redfish+https://10.10.1.12/redfish/v1/Systems/1" || !bmh.Spec.BMC.DisableCertificateVerification ||
		bmh.Spec.BMC.CredentialsName != "worker-1-bmc-secret" || bmh.Spec.BootMACAddress != "52:54:00:aa:01:02" || bmh.Spec.BootMode != metal3.Legacy {
		t.Errorf("worker-1 BMH spec = %+v", bmh.Spec)
	}
	m0 := byName["BareMetalHost/master-0"].(*metal3.BareMetalHost)
	if m0.Spec.Image.URL != "http://172.22.0.1:6180/images/ubuntu-22.04.qcow2" || m0.Spec.Image.Checksum != testImages[0].SHA256 {
		t.Errorf("master-0 image = %+v", m0.Spec.Image)
	}
	ud := string(byName["Secret/master-0-user-data"].(*corev1.Secret).Data["userData"])
	if !strings.HasPrefix(ud, "#cloud-config\n") || !strings.Contains(ud, testKey(t).Public) || !strings.Contains(ud, "admin@example") {
		t.Errorf("user data:\n%s", ud)
	}
	// cloud-init's ntp module points the host's timesyncd at this machine.
	var cc struct {
		NTP struct {
			Enabled bool     `yaml:"enabled"`
			Client  string   `yaml:"ntp_client"`
			Servers []string `yaml:"servers"`
		} `yaml:"ntp"`
	}
	if err := yaml.Unmarshal([]byte(ud), &cc); err != nil || !cc.NTP.Enabled || cc.NTP.Client != "systemd-timesyncd" || strings.Join(cc.NTP.Servers, ",") != "172.22.0.1" {
		t.Errorf("user data's ntp: %+v (%v)\n%s", cc.NTP, err, ud)
	}
	prov := byName["Provisioning/edge-1"].(*bpa.Provisioning)
	if len(prov.Spec.Masters) != 1 || prov.Spec.Masters[0]["master-0"].MACaddress != "52:54:00:aa:01:00" {
		t.Errorf("masters = %+v", prov.Spec.Masters)
	}
	if len(prov.Spec.Workers) != 2 || !prov.Spec.Workers[0]["worker-0"].SRIOV || !prov.Spec.Workers[1]["worker-1"].QAT ||
		prov.Spec.Workers[1]["worker-1"].MACaddress != "52:54:00:aa:01:02" {
		t.Errorf("workers = %+v", prov.Spec.Workers)
	}
	if prov.Spec.PodSubnet != "10.233.64.0/18" || strings.Join(prov.Spec.KUDPlugins, ",") != "emco,ovn4nfv" {
		t.Errorf("provisioning spec = %+v", prov.Spec)
	}
	key := byName["Secret/bootstick-ssh-key"].(*corev1.Secret)
	if key.Type != corev1.SecretTypeSSHAuth || !bytes.Equal(key.Data["ssh-privatekey"], testKey(t).Private) {
		t.Error("SSH key secret does not hold the private key")
	}
}

func TestRedactedOutputHasNoSecrets(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteYAML(&buf, renderSite3(t), false); err != nil {
		t.Fatal(err)
	}
	for _, s := range LeakNeedles([]string{"GoldenMasterPW", "GoldenWorkerPW", "GoldenFilePW"}, testKey(t).Private) {
		if bytes.Contains(buf.Bytes(), []byte(s)) {
			t.Errorf("output contains secret %q", s)
		}
	}
}

// The rule: a site that validates passes the baremetal-operator's own
// admission check, for every site in examples/, the golden sites and
// generated sites of every size.
func TestValidSitesPassBMOWebhook(t *testing.T) {
	key := testKey(t)
	sites := map[string][]byte{}
	for _, f := range []string{"../../examples/site.yaml", "../site/testdata/good.yaml", "testdata/site3.yaml"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sites[f] = b
	}
	for _, n := range []int{1, 2, 3, 10, 100} {
		sites[fmt.Sprintf("generated-%d", n)] = []byte(siteYAML("gen", "g", n, n))
	}
	for name, data := range sites {
		path := name
		if !strings.HasSuffix(name, ".yaml") {
			path = "gen/site.yaml"
		}
		s, err := site.Parse(path, data, site.Options{BundledImages: testImages})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		objs, err := Render(s, Options{SSHKey: key, Images: testImages})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := CheckWebhook(objs); err != nil {
			t.Errorf("%s validates, but: %v", name, err)
		}
	}
}

// CheckWebhook refuses what the baremetal-operator v0.13.2 refuses, each
// with the field at fault, and takes what it takes.
func TestCheckWebhookRefuses(t *testing.T) {
	for _, c := range []struct {
		name   string
		change func(*metal3.BareMetalHost)
		want   string // "" when the operator takes it
	}{
		{"unknown scheme", func(b *metal3.BareMetalHost) { b.Spec.BMC.Address = "nosuchscheme://10.0.0.1" }, "spec.bmc.address: "},
		// Inspection finds an ipmi host's NICs.
		{"ipmi without MAC", func(b *metal3.BareMetalHost) { b.Spec.BootMACAddress = "" }, ""},
		{"ipmi without MAC, no inspection", func(b *metal3.BareMetalHost) {
			b.Spec.BootMACAddress, b.Spec.InspectionMode = "", metal3.InspectionModeDisabled
		}, "spec.bootMACAddress: BMC driver ipmi requires"},
		{"bad MAC", func(b *metal3.BareMetalHost) { b.Spec.BootMACAddress = "52:54:00:zz:00:01" }, "spec.bootMACAddress: "},
		{"virtual media without MAC", func(b *metal3.BareMetalHost) {
			b.Spec.BMC.Address, b.Spec.BootMACAddress = "redfish-virtualmedia://10.0.0.1/redfish/v1/Systems/1", ""
		}, ""},
		{"virtual media without MAC, no inspection", func(b *metal3.BareMetalHost) {
			b.Spec.BMC.Address, b.Spec.BootMACAddress = "redfish-virtualmedia://10.0.0.1/redfish/v1/Systems/1", ""
			b.Spec.InspectionMode = metal3.InspectionModeDisabled
		}, "spec.bootMACAddress: "},
		{"secure boot over ipmi", func(b *metal3.BareMetalHost) { b.Spec.BootMode = metal3.UEFISecureBoot }, "spec.bootMode: BMC driver ipmi does not support secure boot"},
		{"secure boot over redfish", func(b *metal3.BareMetalHost) {
			b.Spec.BMC.Address, b.Spec.BootMode = "redfish://10.0.0.1/redfish/v1/Systems/1", metal3.UEFISecureBoot
		}, ""},
		{"UUID name", func(b *metal3.BareMetalHost) { b.Name = "123e4567-e89b-12d3-a456-426614174000" }, "metadata.name: BareMetalHost resource name cannot be a UUID"},
		{"by-id root hint", func(b *metal3.BareMetalHost) {
			b.Spec.RootDeviceHints = &metal3.RootDeviceHints{DeviceName: "/dev/disk/by-id/wwn-0x5000"}
		}, "spec.rootDeviceHints.deviceName: "},
		{"by-path root hint", func(b *metal3.BareMetalHost) {
			b.Spec.RootDeviceHints = &metal3.RootDeviceHints{DeviceName: "/dev/disk/by-path/pci-0000:00:1f.2-ata-1"}
		}, ""},
		{"cross-namespace user data", func(b *metal3.BareMetalHost) {
			b.Spec.UserData = &corev1.SecretReference{Name: "x", Namespace: "elsewhere"}
		}, "spec.userData: cross-namespace"},
		{"power off disabled, offline", func(b *metal3.BareMetalHost) { b.Spec.DisablePowerOff, b.Spec.Online = true, false }, "spec.disablePowerOff: "},
	} {
		objs := renderSite3(t)
		for _, o := range objs {
			if bmh, ok := o.(*metal3.BareMetalHost); ok && strings.HasPrefix(bmh.Spec.BMC.Address, "ipmi://") {
				c.change(bmh)
				break
			}
		}
		err := CheckWebhook(objs)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: refused, but the operator takes it: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), "would refuse") || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: CheckWebhook = %v, want %q", c.name, err, c.want)
		}
	}
}

// IsHostObject knows every object Render makes for a host (those with
// the host label), and none of the site's others: site apply prunes by it.
func TestIsHostObject(t *testing.T) {
	objs := renderSite3(t)
	hosts := 0
	for _, o := range objs {
		kind, host := o.GetObjectKind().GroupVersionKind().Kind, o.GetLabels()[LabelHost]
		if host != "" {
			hosts++
		}
		for _, h := range []string{"master-0", "worker-0", "worker-1"} {
			if got, want := IsHostObject(kind, o.GetName(), h), h == host; got != want {
				t.Errorf("IsHostObject(%s, %s, %s) = %v, want %v", kind, o.GetName(), h, got, want)
			}
		}
	}
	if hosts != 10 {
		t.Errorf("%d objects with the host label, want 10", hosts)
	}
	for _, c := range [][3]string{{"Secret", "master-0-kubeconfig", "master-0"}, {"ConfigMap", "master-0", "master-0"}, {"BareMetalHost", "master-00", "master-0"}} {
		if IsHostObject(c[0], c[1], c[2]) {
			t.Errorf("IsHostObject%v = true", c)
		}
	}
}

// TestInstallConfigTimeServers: the install ConfigMap names the time
// servers each host's user data names, so that the BPA gives a host
// applied with kubectl the same (issue 26).
func TestInstallConfigTimeServers(t *testing.T) {
	s, err := site.Load("testdata/site3.yaml", site.Options{BundledImages: testImages})
	if err != nil {
		t.Fatal(err)
	}
	inst := &install.Config{KubernetesVersion: "v1.34.4", PackagesURL: "http://172.22.0.1:6180/packages/", Registry: "http://172.22.0.1:5000", PauseImage: "registry.k8s.io/pause:3.10.1",
		Binaries: []install.Binary{{Name: "kubeadm"}, {Name: "kubelet"}, {Name: "kubectl"}},
		Images:   []install.Image{{Name: "registry.k8s.io/pause:3.10.1", Digest: "sha256:" + strings.Repeat("3", 64)}}}
	objs, err := Render(s, Options{SSHKey: testKey(t), Images: testImages, Install: inst})
	if err != nil {
		t.Fatal(err)
	}
	var cfg *install.Config
	var ntp []string
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.ConfigMap:
			if cfg, err = install.ParseConfig(o.Data[install.ConfigKey]); err != nil {
				t.Fatal(err)
			}
		case *corev1.Secret:
			if o.Name == UserDataSecretName("master-0") {
				h, err := userdata.Parse(o.Data[userdata.Key])
				if err != nil {
					t.Fatal(err)
				}
				ntp = h.NTPServers
			}
		}
	}
	if cfg == nil {
		t.Fatal("no install ConfigMap")
	}
	if len(ntp) == 0 || !slices.Equal(cfg.TimeServers, ntp) || ntp[0] != "172.22.0.1" {
		t.Errorf("the install ConfigMap's time servers %v, master-0's user data's %v: want both 172.22.0.1", cfg.TimeServers, ntp)
	}
	if len(inst.TimeServers) != 0 {
		t.Error("Render changed the install configuration it was given")
	}
}
