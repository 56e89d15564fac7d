package rootfs

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestHostMirror(t *testing.T) {
	root := "testdata/apt"
	tests := []struct {
		suite, want, err string
	}{
		{"bookworm", "http://mirror.invalid/debian-archive", ""},
		{"trixie", "http://mirror.invalid/debian", ""},
		{"trixie-security", "http://security.mirror.invalid/debian-security", ""},
		// Only in a disabled stanza and a *.disabled file: the archive of
		// the machine's own release (etc/os-release: bookworm) serves it.
		{"sid", "http://mirror.invalid/debian-archive", ""},
		{"sid-security", "", "no apt source for suite \"sid-security\""},
	}
	for _, tc := range tests {
		t.Run(tc.suite, func(t *testing.T) {
			got, err := HostMirror(root, tc.suite)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("HostMirror = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestKey(t *testing.T) {
	base := Options{Suite: "bookworm", Mirror: "http://m.invalid/debian", Level: 3}
	k := base.inputs().key()
	same := base
	same.Packages = []string{"udev", "kmod"} // already defaults: same set
	if got := same.inputs().key(); got != k {
		t.Errorf("duplicate packages changed the key")
	}
	for name, o := range map[string]Options{
		"suite":   {Suite: "trixie", Mirror: base.Mirror, Level: 3},
		"package": {Suite: "bookworm", Mirror: base.Mirror, Level: 3, Packages: []string{"htop"}},
		"level":   {Suite: "bookworm", Mirror: base.Mirror, Level: 19},
		"epoch":   {Suite: "bookworm", Mirror: base.Mirror, Level: 3, Epoch: time.Unix(1, 0)},
	} {
		if o.inputs().key() == k {
			t.Errorf("changing the %s kept the key", name)
		}
	}
}

// TestSquashLayer makes the appliance layer from a folder.
func TestSquashLayer(t *testing.T) {
	if _, err := exec.LookPath("unsquashfs"); err != nil {
		t.Fatalf("squashfs-tools is needed: %v", err)
	}
	dir := t.TempDir()
	layer := filepath.Join(dir, "layer")
	if err := os.MkdirAll(filepath.Join(layer, "usr/local/bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(layer, "usr/local/bin/firstboot"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, LayerImage)
	epoch := time.Unix(1700000000, 0)
	for i := 0; i < 2; i++ {
		if err := Squash(context.Background(), layer, out, SquashOptions{Epoch: epoch, AllRoot: true}); err != nil {
			t.Fatal(err)
		}
	}
	lst, err := exec.Command("unsquashfs", "-lln", out).CombinedOutput()
	if err != nil {
		t.Fatalf("unsquashfs: %v\n%s", err, lst)
	}
	if !strings.Contains(string(lst), "-rwxr-xr-x 0/0") || !strings.Contains(string(lst), "usr/local/bin/firstboot") {
		t.Errorf("layer listing lacks a root-owned firstboot:\n%s", lst)
	}
	a, _ := os.ReadFile(out)
	if err := Squash(context.Background(), layer, out+"2", SquashOptions{Epoch: epoch, AllRoot: true}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(out + "2")
	if string(a) != string(b) {
		t.Error("two squashfs images of the same folder differ")
	}
	if err := Squash(context.Background(), filepath.Join(dir, "missing"), out, SquashOptions{}); err == nil {
		t.Error("a missing folder gave no error")
	}
}

// TestBuild builds the OS into the shared cache (so later runs and the QEMU
// test reuse it) and checks the entry.
func TestBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("runs mmdebstrap (minutes, root, the Debian mirror): integration tier")
	}
	res, err := Build(context.Background(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("rootfs entry %s (cached %v)", res.Dir, res.Cached)
	for _, f := range []string{res.Kernel, res.Initrd, res.Squashfs} {
		fi, err := os.Stat(f)
		if err != nil || fi.Size() < 1<<20 {
			t.Errorf("%s: %v (size %v)", f, err, fi)
		}
	}
	lst, err := exec.Command("unsquashfs", "-l", res.Squashfs, "usr/lib/live/boot", "usr/bin/containerd").CombinedOutput()
	if err != nil || !strings.Contains(string(lst), "usr/bin/containerd") || !strings.Contains(string(lst), "usr/lib/live/boot") {
		t.Errorf("base squashfs lacks containerd or live-boot: %v\n%s", err, lst)
	}
	debs, _ := filepath.Glob(filepath.Join(filepath.Dir(res.Dir), "debs", "*.deb"))
	if len(debs) < 100 {
		t.Errorf("the .deb cache holds %d files; want the whole OS", len(debs))
	}
	again, err := Build(context.Background(), Options{})
	if err != nil || !again.Cached || again.Dir != res.Dir {
		t.Errorf("second Build = %+v, %v; want the cached entry", again, err)
	}
}

// TestInterruptedBuild cancels a build half way: it leaves no entry that
// looks complete, and the next Build starts over cleanly.
func TestInterruptedBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("runs mmdebstrap (root, the Debian mirror): integration tier")
	}
	cache := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(8*time.Second, cancel)
	opts := Options{CacheDir: cache, Packages: []string{"less"}}
	_, err := Build(ctx, opts)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Build after cancel = %v; want context.Canceled", err)
	}
	ents, _ := filepath.Glob(filepath.Join(cache, "rootfs", "*"))
	for _, e := range ents {
		base := filepath.Base(e)
		if base == "debs" || base == ".lock" {
			continue
		}
		if complete(e) || !strings.HasPrefix(base, ".tmp-") {
			t.Errorf("interrupted build left %s", e)
		}
	}
	_ = opts.defaults()
	if complete(filepath.Join(cache, "rootfs", opts.inputs().key())) {
		t.Error("the interrupted entry looks complete")
	}
}
