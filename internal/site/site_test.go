package site

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bootstick/bootstick/internal/osimage"
	"github.com/bootstick/bootstick/internal/site/sitetest"
)

var testImages = []osimage.Image{{Name: "ubuntu-22.04", File: "ubuntu-22.04.qcow2", SHA256: strings.Repeat("ab", 32), Format: "qcow2"},
	{Name: "debian-13-compute", File: "debian-13-compute.qcow2", SHA256: strings.Repeat("cd", 32), Format: "qcow2"}}

// Passwords used in testdata; no error may contain them.
var testPasswords = []string{"Sup3rSecretPW", "FilePassw0rd"}

func TestGoodSite(t *testing.T) {
	s, err := Load("testdata/good.yaml", Options{BundledImages: testImages})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Hosts[1].BMC.Credentials.Password.Reveal(); got != "FilePassw0rd" {
		t.Errorf("password from credentials file = %q", got)
	}
	if s.Hosts[1].BMC.Credentials.Username != "root" {
		t.Errorf("username from file = %q", s.Hosts[1].BMC.Credentials.Username)
	}
	if s.Cluster.PodCIDR != DefaultPodCIDR || s.Cluster.ServiceCIDR != DefaultServiceCIDR {
		t.Errorf("defaults not applied: %+v", s.Cluster)
	}
	if s.Bootstrap.Provisioning.DHCPHosts != DHCPHostsSite {
		t.Errorf("DHCP answers %q, want the site's hosts only by default", s.Bootstrap.Provisioning.DHCPHosts)
	}
	if s.Hosts[0].BootMode != "UEFI" || s.Hosts[1].Image.ChecksumType != "sha256" {
		t.Errorf("defaults not applied: %+v", s.Hosts)
	}
}

func TestExampleSite(t *testing.T) {
	if _, err := Load("../../examples/site.yaml", Options{BundledImages: testImages}); err != nil {
		t.Fatal(err)
	}
}

// TestBadSites loads every bad site of sitetest: each is refused with an
// error that starts with the file's name, names what is wrong, gives the
// line of a field's problem and shows no password.
func TestBadSites(t *testing.T) {
	sites, err := sitetest.Write(t.TempDir(), "testdata/good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(sites) < 125 {
		t.Fatalf("only %d bad sites", len(sites))
	}
	for _, tc := range sites {
		t.Run(tc.Name, func(t *testing.T) {
			_, err := Load(tc.Path, Options{BundledImages: testImages})
			if err == nil {
				t.Fatalf("%s: Load succeeded, want an error naming %q", tc.Path, tc.Want)
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.Want) {
				t.Fatalf("%s: error:\n%s\nwant it to name %q", tc.Path, msg, tc.Want)
			}
			if !strings.HasPrefix(msg, tc.Path) {
				t.Errorf("%s: error does not start with the file name:\n%s", tc.Path, msg)
			}
			// A field path problem comes with its line.
			if strings.Contains(msg, "problem") && !strings.Contains(msg, "line ") {
				t.Errorf("%s: error has no line:\n%s", tc.Path, msg)
			}
			for _, pw := range testPasswords {
				if strings.Contains(msg, pw) {
					t.Errorf("%s: error leaks a password:\n%s", tc.Path, msg)
				}
			}
		})
	}
}

func TestEveryProblemReported(t *testing.T) {
	data, err := os.ReadFile("testdata/good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := strings.NewReplacer(
		"ipmi://10.10.1.10:623", "ipmii://10.10.1.10",
		"52:54:00:00:01:01", "52:54:00:00:01:00",
		"name: site-a", "name: Site_A",
		"dataDisk: /dev/sdb", "dataDisk: sdb",
	).Replace(string(data))
	_, err = Parse("testdata/site.yaml", []byte(s), Options{BundledImages: testImages})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		"4 problems",
		"line 14: bootstrap.dataDisk",
		"line 21: hosts[0].bmc.address: Unsupported value: \"ipmii\"",
		"line 38: hosts[1].bootMACAddress: Duplicate value",
		"line 49: cluster.name",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error:\n%v\nwant it to contain %q", err, want)
		}
	}
}

func TestSecretNeverPrints(t *testing.T) {
	s, err := Load("testdata/good.yaml", Options{BundledImages: testImages})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"%v", "%+v", "%#v", "%s"} {
		out := strings.ReplaceAll(fmtSprintf(f, s), "\n", " ")
		for _, pw := range testPasswords {
			if strings.Contains(out, pw) {
				t.Errorf("%s of a Site shows a password: %s", f, out)
			}
		}
	}
}

// TestPluginsTheStickServes: with a bundle known, every KUD plugin must
// be one the stick carries; without one, names are not checked.
func TestPluginsTheStickServes(t *testing.T) {
	data, err := os.ReadFile("testdata/good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	data = []byte(strings.Replace(string(data), "kudPlugins: [emco]", "kudPlugins: [flannel, multus]", 1))
	if _, err := Parse("testdata/good.yaml", data, Options{BundledImages: testImages}); err != nil {
		t.Fatalf("no bundle known: %v", err)
	}
	_, err = Parse("testdata/good.yaml", data, Options{BundledImages: testImages, Plugins: []string{"flannel"}})
	if err == nil || !strings.Contains(err.Error(), "cluster.kudPlugins[1]") || !strings.Contains(err.Error(), "the stick serves the KUD plugins flannel only") ||
		strings.Contains(err.Error(), "kudPlugins[0]") {
		t.Errorf("multus on a stick with flannel: %v", err)
	}
	_, err = Parse("testdata/good.yaml", data, Options{BundledImages: testImages, Plugins: []string{}})
	if err == nil || !strings.Contains(err.Error(), "the stick serves no KUD plugins") {
		t.Errorf("a stick with no plugins: %v", err)
	}
}

// TestSecureBootByVirtualMedia: a host whose BMC boots it by virtual media
// may ask for Secure Boot (the ISO's chain is signed), and keeps it.
func TestSecureBootByVirtualMedia(t *testing.T) {
	good, err := os.ReadFile("testdata/good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, scheme := range []string{"redfish-virtualmedia+https", "idrac-virtualmedia"} {
		t.Run(scheme, func(t *testing.T) {
			text, err := sitetest.Case{Edits: []sitetest.Edit{
				sitetest.Set("hosts[1].bmc.address", scheme+"://10.10.1.11/redfish/v1/Systems/1"),
				sitetest.Add("hosts[1]", "bootMode", "UEFISecureBoot"),
			}}.Apply(good)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			p := filepath.Join(dir, "site.yaml")
			// The credentials file good.yaml names, beside it.
			creds, err := os.ReadFile("testdata/creds/worker-0.yaml")
			if err != nil {
				t.Fatal(err)
			}
			os.Mkdir(filepath.Join(dir, "creds"), 0o700)
			if err := os.WriteFile(filepath.Join(dir, "creds", "worker-0.yaml"), creds, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, text, 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := Load(p, Options{BundledImages: testImages})
			if err != nil {
				t.Fatal(err)
			}
			if s.Hosts[1].BootMode != "UEFISecureBoot" {
				t.Errorf("hosts[1].bootMode = %q, want UEFISecureBoot", s.Hosts[1].BootMode)
			}
		})
	}
}
