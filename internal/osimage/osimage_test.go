package osimage

import "testing"

func TestFromFile(t *testing.T) {
	for _, tt := range []struct {
		file string
		want Image
		ok   bool
	}{
		{"debian-13-compute.qcow2", Image{Name: "debian-13-compute", File: "debian-13-compute.qcow2", SHA256: "ab", Format: "qcow2"}, true},
		{"ubuntu-22.04.raw", Image{Name: "ubuntu-22.04", File: "ubuntu-22.04.raw", SHA256: "ab", Format: "raw"}, true},
		{"disk.img", Image{Name: "disk", File: "disk.img", SHA256: "ab", Format: "raw"}, true},
		{"ironic-python-agent.kernel", Image{}, false},
		{"qcow2", Image{}, false},
	} {
		got, ok := FromFile(tt.file, "ab")
		if got != tt.want || ok != tt.ok {
			t.Errorf("FromFile(%q) = %+v, %v; want %+v, %v", tt.file, got, ok, tt.want, tt.ok)
		}
	}
}
