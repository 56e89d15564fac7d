package site

import (
	"os"
	"strings"
	"testing"
)

// TestVIPRequiredOfANewCluster: a site of three masters that makes its
// cluster anew (a stick built with it) must name a control-plane VIP; the
// site of a running cluster, which cannot add one, need not.
func TestVIPRequiredOfANewCluster(t *testing.T) {
	data, err := os.ReadFile("testdata/good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	three := strings.Replace(string(data), "  role: worker\n", "  role: master\n", 1)
	three = strings.Replace(three, "  requirements: {cpu: 32, memory: 128Gi, sriov: true, qat: true}\n", "", 1)
	three = strings.Replace(three, "cluster:\n", `- name: master-2
  role: master
  bmc:
    address: ipmi://10.10.1.12:623
    credentials: {username: admin, password: Sup3rSecretPW}
  bootMACAddress: 52:54:00:00:01:02
  image: {bundled: ubuntu-22.04}
cluster:
`, 1)
	for _, c := range []struct {
		name       string
		text       string
		newCluster bool
		want       string
	}{
		{"three masters, a new cluster", three, true, "cluster.controlPlaneVIP: Required value: the site has 3 masters"},
		{"three masters, a running cluster", three, false, ""},
		{"three masters and a VIP", strings.Replace(three, "  name: site-a\n", "  name: site-a\n  controlPlaneVIP: 172.22.0.5\n", 1), true, ""},
		{"one master", string(data), true, ""},
	} {
		_, err := Parse("testdata/good.yaml", []byte(c.text), Options{BundledImages: testImages, NewCluster: c.newCluster})
		if (err == nil) != (c.want == "") || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}
