package site_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/bootstick/bootstick/internal/osimage"
	"github.com/bootstick/bootstick/internal/render"
	"github.com/bootstick/bootstick/internal/site"
	"github.com/bootstick/bootstick/internal/site/sitetest"
	"github.com/bootstick/bootstick/internal/sshkeys"
)

// FuzzLoad feeds the loader arbitrary bytes: it must never panic, and a
// site it accepts must render and pass the baremetal-operator's webhook.
func FuzzLoad(f *testing.F) {
	good, err := os.ReadFile("testdata/good.yaml")
	if err != nil {
		f.Fatal(err)
	}
	example, err := os.ReadFile("../../examples/site.yaml")
	if err != nil {
		f.Fatal(err)
	}
	for _, c := range sitetest.Cases {
		b, err := c.Apply(good)
		if err != nil {
			f.Fatalf("bad site %s: %v", c.Name, err)
		}
		f.Add(b)
	}
	f.Add(good)
	f.Add(example)
	key, err := sshkeys.Generate(nil)
	if err != nil {
		f.Fatal(err)
	}
	images := []osimage.Image{{Name: "ubuntu-22.04", File: "u.qcow2", SHA256: strings.Repeat("0", 64)}}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := site.Parse("testdata/fuzz.yaml", data, site.Options{BundledImages: images})
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		objs, err := render.Render(s, render.Options{SSHKey: key, Images: images})
		if err != nil {
			t.Fatalf("a valid site does not render: %v", err)
		}
		if err := render.CheckWebhook(objs); err != nil {
			t.Fatalf("a valid site would be refused by the baremetal-operator: %v", err)
		}
	})
}

// secretPlaces put a password where an operator might: in the password
// field, as the wrong type, in a BMC URL's user information, as an anchor
// name, under an unknown field, in a numeric or boolean field.
var secretPlaces = []string{
	"    credentials: {username: admin, password: %q}\n",
	"    credentials: {username: admin, password: [%q]}\n",
	"    credentials: %q\n",
	"    credentials: {username: admin, passwd: %q}\n",
	"    credentials: {username: admin, password: *%s}\n",
	"    credentials: {username: [admin, %q], password: x}\n",
	"    address: \"ipmi://admin:%s@10.10.1.10:623\"\n    credentials: {username: admin, password: x}\n",
	"    address: \"redfish://%s@10.10.1.10/redfish/v1/Systems/1\"\n    credentials: {username: admin, password: x}\n",
	"    credentials: {username: admin, password: x}\n    disableCertificateVerification: %q\n",
	"    credentials: {username: admin, password: x}\n  requirements: {cpu: %q}\n",
}

// FuzzNoSecretInErrors: whatever the password and wherever it stands, the
// loader's error never carries it.
func FuzzNoSecretInErrors(f *testing.F) {
	for i := range secretPlaces {
		f.Add("Sup3rSecretPW", uint8(i))
		f.Add("p@ss:w/rd#1?%zz", uint8(i))
		f.Add("'\"`\\", uint8(i))
	}
	f.Fuzz(func(t *testing.T, pw string, place uint8) {
		if len(pw) < 6 || strings.ContainsAny(pw, "\n\r\x00") {
			return // too short to tell apart from the file's own text
		}
		doc := `apiVersion: bootstick.dev/v1alpha1
kind: Site
bootstrap:
  provisioning: {interface: eno2, address: 172.22.0.1/24, dhcpRange: {start: 172.22.0.10, end: 172.22.0.100}}
  dataDisk: /dev/sdb
hosts:
- name: master-0
  role: master
  bootMACAddress: 52:54:00:00:01:00
  image: {url: "http://172.22.0.1:6180/images/os.qcow2", checksum: ` + strings.Repeat("ab", 32) + `}
  bmc:
` + fmt.Sprintf(secretPlaces[int(place)%len(secretPlaces)], pw) + `cluster: {name: site-a}
`
		if strings.Contains(strings.ReplaceAll(doc, pw, ""), pw) || strings.Contains("apiVersion bootstick.dev/v1alpha1 Site master-0 172.22.0.1 ipmi redfish admin", pw) {
			return
		}
		_, err := site.Parse("fuzz.yaml", []byte(doc), site.Options{})
		if err != nil && strings.Contains(err.Error(), pw) {
			t.Fatalf("the error carries the password %q:\n%v", pw, err)
		}
	})
}
