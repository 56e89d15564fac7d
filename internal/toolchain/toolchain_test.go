package toolchain

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/layout"

	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/ocibuild"
	"github.com/bootstick/bootstick/internal/recipes"
)

const helloMain = `package main

import "fmt"

var version = "dev"

func main() { fmt.Println("hello", version) }
`

// writeRepo makes a tiny repository with one local recipe and returns the
// recipes file.
func writeRepo(t *testing.T, recipesYAML string, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f := filepath.Join(dir, "images", "recipes.yaml")
	if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f, []byte(recipesYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

const helloRecipes = `apiVersion: bootstick.dev/v1alpha1
kind: Recipes
binaries:
- name: hello
  local: ./hello
  version: "1.0"
  ldflags: ["-X main.version={{.Version}}"]
  packages: [.]
images:
- ref: example.test/hello:1.0
  binaries: [hello]
- ref: example.test/tools/hello-root:1.0
  binaries: [hello]
  dir: /
`

func helloFiles() map[string]string {
	return map[string]string{"go.mod": "module example.test/repo\n\ngo 1.22\n", "images/hello/main.go": helloMain}
}

func build(t *testing.T, recipesFile, cacheDir string) (*Result, error) {
	t.Helper()
	spec, err := recipes.Load(recipesFile)
	if err != nil {
		t.Fatal(err)
	}
	store, err := cas.Open(cacheDir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	return Build(ctx, Options{Spec: spec, Store: store, Epoch: time.Unix(1700000000, 0)})
}

func TestBuildCachesAndSharesBlobs(t *testing.T) {
	f := writeRepo(t, helloRecipes, helloFiles())
	cache := t.TempDir()
	res, err := build(t, f, cache)
	if err != nil {
		t.Fatal(err)
	}
	for step, built := range res.Manifest.Actions {
		if !built {
			t.Errorf("first build: %s was cached, want built", step)
		}
	}
	out, err := exec.Command(res.Bin("hello")).Output()
	if err != nil || strings.TrimSpace(string(out)) != "hello 1.0" {
		t.Fatalf("bin/hello printed %q (%v), want the stamped version %q", out, err, "hello 1.0")
	}

	// The layout holds both images by full name and tag, and stores the
	// base layer they share once.
	idx, err := layout.ImageIndexFromPath(res.Layout())
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]string{}
	refs := 0
	for _, d := range im.Manifests {
		names[d.Annotations[ocibuild.AnnotationImageName]] = d.Annotations[ocibuild.AnnotationRefName]
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		ls, _ := img.Layers()
		refs += len(ls) + 2 // layers, config, manifest
		cf, _ := img.ConfigFile()
		if cf.OS != "linux" || cf.Architecture != "amd64" || !cf.Created.Time.Equal(time.Unix(1700000000, 0)) {
			t.Errorf("%s config: os %s arch %s created %v", d.Annotations[ocibuild.AnnotationImageName], cf.OS, cf.Architecture, cf.Created)
		}
	}
	want := map[string]string{"example.test/hello:1.0": "1.0", "example.test/tools/hello-root:1.0": "1.0"}
	if len(names) != 2 || names["example.test/hello:1.0"] != "1.0" || names["example.test/tools/hello-root:1.0"] != "1.0" {
		t.Fatalf("layout names %v, want %v", names, want)
	}
	blobs, _ := os.ReadDir(filepath.Join(res.Layout(), "blobs", "sha256"))
	if len(blobs) != refs-1 {
		t.Fatalf("layout has %d blobs for %d references, want %d (the base layer stored once)", len(blobs), refs, refs-1)
	}

	// Nothing changed: everything comes from the cache, same digests.
	again, err := build(t, f, cache)
	if err != nil {
		t.Fatal(err)
	}
	for step, built := range again.Manifest.Actions {
		if built {
			t.Errorf("second build: %s was rebuilt, want cached", step)
		}
	}
	if again.Dir != res.Dir {
		t.Errorf("second build made a new view %s, want %s", again.Dir, res.Dir)
	}

	// A fresh cache gives byte-identical images.
	fresh, err := build(t, f, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for i := range res.Manifest.Images {
		if fresh.Manifest.Images[i] != res.Manifest.Images[i] {
			t.Errorf("image %s: digest %s from a fresh cache, %s before", res.Manifest.Images[i].Ref, fresh.Manifest.Images[i].Digest, res.Manifest.Images[i].Digest)
		}
	}

	// A change to one image rebuilds that image only.
	changed := strings.Replace(helloRecipes, "  dir: /\n", "  dir: /opt\n", 1)
	if err := os.WriteFile(f, []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	third, err := build(t, f, cache)
	if err != nil {
		t.Fatal(err)
	}
	wantBuilt := map[string]bool{"recipe hello": false, "image example.test/hello:1.0": false, "image example.test/tools/hello-root:1.0": true}
	for step, built := range third.Manifest.Actions {
		if built != wantBuilt[step] {
			t.Errorf("after changing one image: %s built=%v, want %v", step, built, wantBuilt[step])
		}
	}
	if _, err := os.Stat(res.Dir); err == nil {
		t.Errorf("old view %s was not removed", res.Dir)
	}
	cur, err := Open(cache)
	if err != nil || cur.Dir != third.Dir {
		t.Fatalf("Open(cache) = %v, %v; want the newest view %s", cur, err, third.Dir)
	}
}

// assertNoHalfEntry checks that a failed build left no action record, no
// work folder and no toolchain view behind.
func assertNoHalfEntry(t *testing.T, cache string) {
	t.Helper()
	for _, d := range []string{"actions", "tmp"} {
		entries, err := os.ReadDir(filepath.Join(cache, d))
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 0 {
			t.Errorf("%s/ holds %d entries after a failed build, want none", d, len(entries))
		}
	}
	if _, err := os.Lstat(filepath.Join(cache, "toolchain", "current")); err == nil {
		t.Errorf("a failed build left toolchain/current")
	}
}

func TestRecipeThatFailsToCompile(t *testing.T) {
	broken := `package main

func main() { undefinedThing() }
`
	recipesYAML := `apiVersion: bootstick.dev/v1alpha1
kind: Recipes
binaries:
- name: broken
  module: example.test/broken
  version: v1.0.0
  replace:
    example.test/broken: BROKEN
  packages: [example.test/broken]
`
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "go.mod"), []byte("module example.test/broken\n\ngo 1.22\n"), 0o644)
	os.WriteFile(filepath.Join(src, "main.go"), []byte(broken), 0o644)
	f := writeRepo(t, strings.Replace(recipesYAML, "BROKEN", src, 1), nil)
	cache := t.TempDir()

	_, err := build(t, f, cache)
	if err == nil {
		t.Fatal("build of a recipe that does not compile succeeded")
	}
	for _, want := range []string{"recipe broken: example.test/broken@v1.0.0: building failed", "undefined: undefinedThing"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not contain %q:\n%v", want, err)
		}
	}
	assertNoHalfEntry(t, cache)

	// Fixed, the next run recovers.
	os.WriteFile(filepath.Join(src, "main.go"), []byte(helloMain), 0o644)
	res, err := build(t, f, cache)
	if err != nil {
		t.Fatalf("build after the fix: %v", err)
	}
	if out, err := exec.Command(res.Bin("broken")).Output(); err != nil || !strings.HasPrefix(string(out), "hello") {
		t.Fatalf("fixed binary printed %q, %v", out, err)
	}
}

func TestPinTheProxyRefuses(t *testing.T) {
	if testing.Short() {
		t.Skip("network: asks the Go module proxy for a version that does not exist, then builds etcdctl")
	}
	recipesYAML := `apiVersion: bootstick.dev/v1alpha1
kind: Recipes
binaries:
- name: etcdctl
  module: go.etcd.io/etcd/etcdctl/v3
  version: VERSION
  packages: [go.etcd.io/etcd/etcdctl/v3]
`
	f := writeRepo(t, strings.Replace(recipesYAML, "VERSION", "v3.6.99", 1), nil)
	cache := t.TempDir()
	_, err := build(t, f, cache)
	if err == nil {
		t.Fatal("a pin to a version the proxy does not have built")
	}
	for _, want := range []string{"recipe etcdctl: go.etcd.io/etcd/etcdctl/v3@v3.6.99: resolving failed: the module proxy refused it", "images/recipes.yaml"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not contain %q:\n%v", want, err)
		}
	}
	assertNoHalfEntry(t, cache)

	os.WriteFile(f, []byte(strings.Replace(recipesYAML, "VERSION", "v3.6.5", 1)), 0o644)
	res, err := build(t, f, cache)
	if err != nil {
		t.Fatalf("build after fixing the pin: %v", err)
	}
	out, err := exec.Command(res.Bin("etcdctl"), "version").Output()
	if err != nil || !strings.Contains(string(out), "etcdctl version: 3.6.5") {
		t.Fatalf("etcdctl version printed %q, %v", out, err)
	}
}

// TestChangedPinRebuildsOnlyWhatDependsOnIt changes one recipe's version:
// that recipe and the image holding its binary rebuild; the other recipe
// and image come from the cache.
func TestChangedPinRebuildsOnlyWhatDependsOnIt(t *testing.T) {
	twoRecipes := `apiVersion: bootstick.dev/v1alpha1
kind: Recipes
binaries:
- name: hello
  local: ./hello
  version: "1.0"
  ldflags: ["-X main.version={{.Version}}"]
  packages: [.]
- name: world
  local: ./world
  version: "WORLD"
  ldflags: ["-X main.version={{.Version}}"]
  packages: [.]
images:
- ref: example.test/hello:1.0
  binaries: [hello]
- ref: example.test/world:1.0
  binaries: [world]
`
	files := helloFiles()
	files["images/world/main.go"] = helloMain
	f := writeRepo(t, strings.Replace(twoRecipes, "WORLD", "1.0", 1), files)
	cache := t.TempDir()
	first, err := build(t, f, cache)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f, []byte(strings.Replace(twoRecipes, "WORLD", "1.1", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	second, err := build(t, f, cache)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{
		"recipe hello": false, "image example.test/hello:1.0": false,
		"recipe world": true, "image example.test/world:1.0": true,
	}
	for step, built := range second.Manifest.Actions {
		if built != want[step] {
			t.Errorf("after changing world's pin: %s built=%v, want %v", step, built, want[step])
		}
	}
	if first.Manifest.Images[0] != second.Manifest.Images[0] || first.Manifest.Images[1] == second.Manifest.Images[1] {
		t.Errorf("image digests: before %v, after %v; want only world's to change", first.Manifest.Images, second.Manifest.Images)
	}
	out, err := exec.Command(second.Bin("world")).Output()
	if err != nil || strings.TrimSpace(string(out)) != "hello 1.1" {
		t.Fatalf("bin/world printed %q, %v; want the new pin stamped", out, err)
	}
}

// inRoot follows an image's links inside its root, never the host's.
func TestInRoot(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "usr", "bin"), 0o755)
	os.WriteFile(filepath.Join(root, "usr", "bin", "busybox"), nil, 0o755)
	os.Symlink("usr/bin", filepath.Join(root, "bin"))
	os.Symlink("busybox", filepath.Join(root, "usr", "bin", "sh"))
	os.Symlink("/usr/bin/busybox", filepath.Join(root, "usr", "bin", "ash"))
	os.Symlink("nothing", filepath.Join(root, "usr", "bin", "dangling"))
	os.Symlink("/etc/passwd", filepath.Join(root, "usr", "bin", "host"))
	os.Symlink("loop", filepath.Join(root, "usr", "bin", "loop"))
	for p, want := range map[string]bool{
		"/usr/bin/busybox": true, "/bin/busybox": true, "/bin/sh": true, "/usr/bin/ash": true,
		"/usr/bin/dangling": false, "/usr/bin/host": false, "/usr/bin/loop": false, "/sbin/sh": false,
	} {
		if got := inRoot(root, p); got != want {
			t.Errorf("inRoot(%s) = %v, want %v", p, got, want)
		}
	}
}
