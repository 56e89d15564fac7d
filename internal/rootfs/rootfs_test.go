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

	"github.com/bootstick/bootstick/internal/debs"
)

func TestHostMirror(t *testing.T) {
	tests := []struct {
		root, suite, want, err string
	}{
		{"testdata/apt", "bookworm", "http://mirror.invalid/debian-archive", ""},
		{"testdata/apt", "trixie", "http://mirror.invalid/debian", ""},
		{"testdata/apt", "trixie-security", "http://security.mirror.invalid/debian-security", ""},
		// Only in a disabled stanza and a *.disabled file: the archive of
		// the machine's own release (etc/os-release: bookworm) serves it.
		{"testdata/apt", "sid", "http://mirror.invalid/debian-archive", ""},
		// No source of sid-security nor of bookworm-security: the error
		// names the apt configuration and the bundle's field.
		{"testdata/apt", "sid-security", "", `no apt source for suite "sid-security" (nor for this machine's "bookworm-security") in testdata/apt/etc/apt/sources.list or testdata/apt/etc/apt/sources.list.d: add one there, or give the security mirror (a bundle's os.securityMirror)`},
		// A bookworm machine as installed: trixie from its own mirror,
		// trixie-security from the source of its own bookworm-security.
		{"testdata/apt-bookworm", "trixie", "http://mirror.invalid/debian", ""},
		{"testdata/apt-bookworm", "trixie-security", "http://security.mirror.invalid/debian-security", ""},
		{"testdata/apt-bookworm", "bookworm-security", "http://security.mirror.invalid/debian-security", ""},
		{"testdata/none", "trixie", "", `no apt source for suite "trixie" in testdata/none/etc/apt/sources.list or testdata/none/etc/apt/sources.list.d: add one there, or give the mirror (a bundle's os.mirror)`},
	}
	for _, tc := range tests {
		t.Run(tc.root+"/"+tc.suite, func(t *testing.T) {
			got, err := HostMirror(tc.root, tc.suite)
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
	const sec = "http://s.invalid/debian-security"
	base := Options{Suite: "bookworm", Mirror: "http://m.invalid/debian", SecurityMirror: sec, Level: 3}
	k := base.inputs().key()
	same := base
	same.Packages = []string{"udev", "kmod"} // already defaults: same set
	if got := same.inputs().key(); got != k {
		t.Errorf("duplicate packages changed the key")
	}
	locked := base
	locked.Locked = []debs.Package{{Name: "udev", Version: "252.39-1~deb12u1"}}
	update := base
	update.Locked = []debs.Package{{Name: "udev", Version: "252.39-1~deb12u2", Suite: "bookworm-security"}}
	if locked.inputs().key() == update.inputs().key() {
		t.Errorf("another locked version kept the key")
	}
	for name, o := range map[string]Options{
		"suite":           {Suite: "trixie", Mirror: base.Mirror, SecurityMirror: sec, Level: 3},
		"security mirror": {Suite: "bookworm", Mirror: base.Mirror, SecurityMirror: "http://other.invalid/debian-security", Level: 3},
		"package":         {Suite: "bookworm", Mirror: base.Mirror, SecurityMirror: sec, Level: 3, Packages: []string{"htop"}},
		"locked version":  locked,
		"level":           {Suite: "bookworm", Mirror: base.Mirror, SecurityMirror: sec, Level: 19},
		"epoch":           {Suite: "bookworm", Mirror: base.Mirror, SecurityMirror: sec, Level: 3, Epoch: time.Unix(1, 0)},
	} {
		if o.inputs().key() == k {
			t.Errorf("changing the %s kept the key", name)
		}
	}
}

// TestDefaultsSources: the mirrors the options give stay; the missing ones
// come from the apt configuration, the security mirror from the source of
// the machine's own -security suite.
func TestDefaultsSources(t *testing.T) {
	for _, tc := range []struct {
		name             string
		in               Options
		mirror, security string
	}{
		{"from the host", Options{Suite: "trixie"}, "http://mirror.invalid/debian", "http://security.mirror.invalid/debian-security"},
		{"mirror given", Options{Suite: "trixie", Mirror: "http://user.invalid/debian"}, "http://user.invalid/debian", "http://security.mirror.invalid/debian-security"},
		{"both given", Options{Suite: "trixie", Mirror: "http://user.invalid/debian", SecurityMirror: "http://user.invalid/security"}, "http://user.invalid/debian", "http://user.invalid/security"},
		{"unstable", Options{Suite: "sid"}, "http://mirror.invalid/debian", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.in
			o.AptRoot, o.CacheDir = "testdata/apt-bookworm", t.TempDir()
			if err := o.defaults(); err != nil {
				t.Fatal(err)
			}
			if o.Mirror != tc.mirror || o.SecurityMirror != tc.security {
				t.Errorf("mirrors %q and %q, want %q and %q", o.Mirror, o.SecurityMirror, tc.mirror, tc.security)
			}
		})
	}
	o := Options{Suite: "trixie", Mirror: "http://user.invalid/debian", AptRoot: "testdata/none", CacheDir: t.TempDir()}
	if err := o.defaults(); err == nil || !strings.Contains(err.Error(), "os.securityMirror") {
		t.Errorf("no security source anywhere: %v", err)
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

// The real OS build, with the default bundle's options, is checked by
// package stick's TestRealBuild (checkOSEntry), which builds it anyway.

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
