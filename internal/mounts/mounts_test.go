package mounts

import "testing"

func TestParse(t *testing.T) {
	data := `22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
30 22 7:0 / /run/bootstick/iso\040dir ro,relatime - iso9660 /dev/loop0 ro
31 22 0:5 / /var/lib/kubelet/pods/x rw - tmpfs tmpfs rw
`
	got := Parse(data)
	if len(got) != 3 {
		t.Fatalf("Parse = %+v", got)
	}
	if m := got[1]; m.Point != "/run/bootstick/iso dir" || m.Device != "7:0" || m.FSType != "iso9660" || m.Source != "/dev/loop0" {
		t.Errorf("mount with an escaped space: %+v", m)
	}
	if Unescape(`a\134b\011c`) != "a\\b\tc" {
		t.Errorf("Unescape: %q", Unescape(`a\134b\011c`))
	}
}

func TestUnderIsDeepestFirst(t *testing.T) {
	// / is always mounted; a folder under nothing is not.
	pts, err := Under("/")
	if err != nil || len(pts) == 0 || pts[len(pts)-1] != "/" {
		t.Fatalf("Under(/) = %v, %v; want / last", pts, err)
	}
	if !Mounted("/") || Mounted("/no/such/mount/point") {
		t.Error("Mounted is wrong for / or a missing folder")
	}
}
