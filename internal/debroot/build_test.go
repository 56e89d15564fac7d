package debroot

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/bootstick/bootstick/internal/debs"
)

func TestUpstream(t *testing.T) {
	for in, want := range map[string]string{
		"1:29.0.5-0+deb13u3": "29.0.5",
		"10.2.0-3":           "10.2.0",
		"2.91-1+deb13u2":     "2.91",
		"1.0":                "1.0",
		"2:1.2-3-4":          "1.2-3",
	} {
		if got := Upstream(in); got != want {
			t.Errorf("Upstream(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestCheckPins: a pin holds on the upstream version; a changed or missing
// package is named with what the mirror gave.
func TestCheckPins(t *testing.T) {
	installed := []Installed{{Name: "ironic-common", Version: "1:29.0.5-0+deb13u3"}, {Name: "ipxe", Version: "1.21-1"}}
	if err := checkPins(map[string]string{"ironic-common": "29.0.5"}, installed); err != nil {
		t.Fatal(err)
	}
	err := checkPins(map[string]string{"ironic-common": "29.0.6", "ironic-python-agent": "10.2.0"}, installed)
	if err == nil {
		t.Fatal("changed pins passed")
	}
	for _, want := range []string{"ironic-common: pinned at 29.0.6, the mirror gave 1:29.0.5-0+deb13u3", "ironic-python-agent: pinned at 10.2.0, not installed", "images/recipes.yaml"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

// TestPlaceholder: an empty package that satisfies a versioned dependency.
func TestPlaceholder(t *testing.T) {
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		t.Fatalf("dpkg-deb is needed: %v", err)
	}
	deb, err := placeholder(context.Background(), t.TempDir(), "python3-libvirt")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("dpkg-deb", "-f", deb, "Package", "Version", "Architecture").Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := string(out); !strings.Contains(got, "Package: python3-libvirt") || !strings.Contains(got, "Version: 99:0-bootstick") || !strings.Contains(got, "Architecture: all") {
		t.Errorf("control:\n%s", got)
	}
	files, err := exec.Command("dpkg-deb", "-c", deb).Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(strings.TrimSpace(string(files)), "\n") > 0 {
		t.Errorf("the placeholder carries files:\n%s", files)
	}
	if filepath.Ext(deb) != ".deb" {
		t.Errorf("placeholder file %s", deb)
	}
}

// TestRemoveMountPoints removes the copy of a build folder's path that
// mmdebstrap's automount hook leaves in a root, and the parents it left
// empty, but none of the root's own folders.
func TestRemoveMountPoints(t *testing.T) {
	root := t.TempDir()
	build := "/var/cache/bootstick/tmp/debroot-1/.placeholders-2"
	for _, d := range []string{"var/cache/apt", "tmp", filepath.Join(build[1:])} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, build, "fio_99.0-bootstick_all.deb"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := removeMountPoints(root, build); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "var/cache/bootstick")); !os.IsNotExist(err) {
		t.Errorf("var/cache/bootstick is still in the root (%v)", err)
	}
	for _, d := range []string{"var/cache/apt", "var/cache", "tmp"} {
		if _, err := os.Stat(filepath.Join(root, d)); err != nil {
			t.Errorf("the root's own %s went: %v", d, err)
		}
	}
	// A build folder right under one of the root's top folders: that
	// folder stays even when it is left empty.
	if err := os.MkdirAll(filepath.Join(root, "tmp/build/.placeholders-3"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := removeMountPoints(root, "/tmp/build/.placeholders-3"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "tmp")); err != nil {
		t.Errorf("the root's tmp went: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "tmp/build")); !os.IsNotExist(err) {
		t.Errorf("tmp/build is still in the root (%v)", err)
	}
}

// TestMmdebstrapArgs: every suite is a source line of its own, checked
// with the Debian archive keyring; each pin is installed at its version
// and pinned for the whole build, with the binaries of its source, by a
// preferences file that leaves the root at the end.
func TestMmdebstrapArgs(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	src := debs.Sources{Suite: "trixie", Mirror: "http://mirror.invalid/debian", SecurityMirror: "http://security.mirror.invalid/debian-security"}
	r := Run{Sources: src, Components: []string{"main", "non-free-firmware"}, Include: []string{"openssh-server", "kmod", "/x/p.deb"},
		Pins: []debs.Package{{Name: "openssh-server", Version: "1:10.0p1-7+deb13u4", Source: "openssh"}, {Name: "curl", Version: "8.14.1-2+deb13u2"}}}
	args, cleanup, err := r.args(root)
	if err != nil {
		t.Fatal(err)
	}
	lines, _ := src.Lines(r.Components)
	tail := append([]string{"trixie", root}, lines...)
	if got := args[len(args)-len(tail):]; !slices.Equal(got, tail) {
		t.Errorf("suite, target and sources:\n%q\nwant\n%q", got, tail)
	}
	for _, l := range lines {
		if !strings.Contains(l, "[signed-by="+debs.Keyring+"]") {
			t.Errorf("source %q is not checked with the archive keyring", l)
		}
	}
	if !slices.Contains(args, "--include=kmod,openssh-server=1:10.0p1-7+deb13u4,curl=8.14.1-2+deb13u2") || !slices.Contains(args, "--include=/x/p.deb") {
		t.Errorf("includes: %q", args)
	}
	var pref string
	for _, a := range args {
		if f, ok := strings.CutPrefix(a, "--setup-hook=upload "); ok {
			pref = strings.Fields(f)[0]
		}
	}
	data, err := os.ReadFile(pref)
	if err != nil {
		t.Fatalf("no preferences file in %q: %v", args, err)
	}
	want := "Package: openssh-server src:openssh\nPin: version 1:10.0p1-7+deb13u4\nPin-Priority: 1001\n\n" +
		"Package: curl src:curl\nPin: version 8.14.1-2+deb13u2\nPin-Priority: 1001\n\n"
	if string(data) != want {
		t.Errorf("preferences:\n%s\nwant\n%s", data, want)
	}
	if !slices.Contains(args, `--customize-hook=rm -f "$1"`+pinsFile) {
		t.Errorf("the pins stay in the root: %q", args)
	}
	cleanup()
	if _, err := os.Stat(pref); !os.IsNotExist(err) {
		t.Errorf("cleanup left %s", pref)
	}

	r.Pins = nil
	args, _, err = r.args(root)
	if err != nil || strings.Contains(strings.Join(args, " "), "preferences") || !slices.Contains(args, "--include=openssh-server,kmod") {
		t.Errorf("no pins, yet %q, %v", args, err)
	}
	r.Sources.SecurityMirror = ""
	if _, _, err := r.args(root); err == nil || !strings.Contains(err.Error(), "trixie-security") {
		t.Errorf("no security mirror: %v", err)
	}
}
