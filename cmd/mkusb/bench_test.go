package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bootstick/bootstick/internal/benchtable"
	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/command"
)

// copyTree copies a folder of this repository (cp -a).
func copyTree(b *testing.B, src, dst string) {
	if out, err := exec.Command("cp", "-a", src, dst).CombinedOutput(); err != nil {
		b.Fatalf("copying %s: %v\n%s", src, err, out)
	}
}

// BenchmarkRebuild builds the default bundle from a copy of this
// repository's bundle, recipes, manifests and overlay into an empty cache
// (cold), then again after changing one manifest, then after changing one
// recipe pin (the BPA recipe's version, which its binary is stamped with),
// and reports each rebuild against the cold build. The cache is empty but
// for Debian's downloaded .debs (shared with the machine's cache, as Go's
// module and build caches are): downloads are not what a rebuild saves.
func BenchmarkRebuild(b *testing.B) {
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		b.Fatal(err)
	}
	tmp := b.TempDir()
	for _, d := range []string{"bundle", "images", "manifests", "overlay", "internal", "go.mod", "go.sum"} {
		copyTree(b, filepath.Join(repo, d), filepath.Join(tmp, d))
	}
	os.Remove(filepath.Join(tmp, "bundle", "default.lock"))
	bin := filepath.Join(tmp, "bin")
	for _, p := range []string{"mkusb", "firstboot"} {
		if out, err := exec.Command("go", "build", "-o", filepath.Join(bin, p), "github.com/bootstick/bootstick/cmd/"+p).CombinedOutput(); err != nil {
			b.Fatalf("building %s: %v\n%s", p, err, out)
		}
	}
	cache := filepath.Join(tmp, "cache")
	if err := os.MkdirAll(filepath.Join(cache, "rootfs"), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(cas.DefaultRoot(), "rootfs", "debs"), filepath.Join(cache, "rootfs", "debs")); err != nil {
		b.Fatal(err)
	}
	n := 0
	build := func(what string, extra ...string) time.Duration {
		n++
		cmd := exec.Command(filepath.Join(bin, "mkusb"), append([]string{"build", "--cache", cache,
			"--bundle", filepath.Join(tmp, "bundle", "default.yaml"), "--output", filepath.Join(tmp, fmt.Sprintf("b%d.iso", n)),
			"--firstboot", filepath.Join(bin, "firstboot"), "--overlay", filepath.Join(tmp, "overlay")}, extra...)...)
		cmd.Dir = tmp
		start := time.Now()
		out, err := cmd.CombinedOutput()
		d := time.Since(start)
		if err != nil {
			b.Fatalf("mkusb build (%s): %v\n%s", what, err, command.Tail(string(out), 30))
		}
		b.Logf("%s: %s", what, d.Round(100*time.Millisecond))
		return d
	}
	edit := func(file, from, to string) {
		p := filepath.Join(tmp, file)
		data, err := os.ReadFile(p)
		if err != nil {
			b.Fatal(err)
		}
		s := strings.Replace(string(data), from, to, 1)
		if s == string(data) {
			b.Fatalf("%s: %q not found", file, from)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	cold := build("cold")
	edit("manifests/00-namespaces.yaml", "\n", "\n# a changed manifest\n")
	manifest := build("one manifest changed")
	edit("images/recipes.yaml", "  local: ../internal/bpa\n  version: v0.1.0", "  local: ../internal/bpa\n  version: v0.1.1")
	pin := build("one recipe pin changed")
	locked := build("nothing changed, --locked", "--locked")
	b.StopTimer()
	what := "mkusb build of the default bundle (the toolchain, the live OS, the Debian roots of Ironic, the ramdisk, the compute image and the kind node, the ISO), one run each"
	for _, r := range []struct {
		name string
		d    time.Duration
		how  string
	}{
		{"rebuild, one manifest changed", manifest, "00-namespaces.yaml gains a comment"},
		{"rebuild, one recipe pin changed", pin, "the BPA recipe's version v0.1.0 → v0.1.1: its binary, image, the lock and the ISO are made again"},
		{"rebuild, nothing changed (--locked)", locked, "the same bundle again, built exactly as the lock pins"},
	} {
		benchtable.Record(b, benchtable.Row{Group: "mkusb", Name: r.name,
			Ours:   benchtable.Side{Name: "rebuild", Value: r.d.Seconds(), Unit: "s"},
			Ref:    benchtable.Side{Name: "cold build", Value: cold.Seconds(), Unit: "s"},
			Better: "lower",
			What:   what + "; " + r.how + "; the cold build starts from an empty cache but for the downloaded .debs and Go's module and build caches"})
	}
}
