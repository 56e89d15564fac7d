package firstboot

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bootstick/bootstick/internal/mounts"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/random"

	"github.com/bootstick/bootstick/internal/bundle"
	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/config"
	"github.com/bootstick/bootstick/internal/iso"
	"github.com/bootstick/bootstick/internal/registry"
)

// smallBundle lays out a bundle folder: a registry with one image, one
// manifest, and a lock pinning both.
func smallBundle(t *testing.T) (dir, layer string) {
	t.Helper()
	dir = t.TempDir()
	lp, err := layout.Write(filepath.Join(dir, "registry"), empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	img, _ := random.Image(4096, 1)
	ref := "registry.example/app:v1"
	if err := lp.AppendImage(img, layout.WithAnnotations(map[string]string{registry.AnnotationImageName: ref})); err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	layers, _ := img.Layers()
	ld, _ := layers[0].Digest()
	manifest := []byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n")
	os.MkdirAll(filepath.Join(dir, "manifests"), 0o755)
	os.WriteFile(filepath.Join(dir, "manifests", "00-ns.yaml"), manifest, 0o644)
	lock := &bundle.Lock{APIVersion: config.APIVersion, Kind: bundle.LockKind,
		Images:    []bundle.LockedImage{{Ref: ref, Digest: cas.Digest(d.String()), Source: "registry"}},
		Manifests: []bundle.LockedFile{{Name: "00-ns.yaml", Dest: "manifests", Source: "local", SHA256: cas.DigestOf(manifest)}}}
	if err := bundle.WriteLock(filepath.Join(dir, "bundle.lock"), lock); err != nil {
		t.Fatal(err)
	}
	return dir, filepath.Join(dir, "registry", "blobs", "sha256", ld.Hex)
}

func TestVerifyBundle(t *testing.T) {
	cases := []struct {
		name   string
		damage func(dir, layer string)
		want   []string // substrings of the error; nil: valid
	}{
		{name: "intact"},
		{name: "corrupted blob", damage: func(dir, layer string) {
			data, _ := os.ReadFile(layer)
			data[10] ^= 0xff
			os.WriteFile(layer, data, 0o644)
		}, want: []string{"registry/blobs/sha256/" + "", "the lock says", "damaged"}},
		{name: "missing manifest", damage: func(dir, layer string) {
			os.Remove(filepath.Join(dir, "manifests", "00-ns.yaml"))
		}, want: []string{"manifests/00-ns.yaml", "no such file"}},
		{name: "edited manifest", damage: func(dir, layer string) {
			os.WriteFile(filepath.Join(dir, "manifests", "00-ns.yaml"), []byte("kind: Evil\n"), 0o644)
		}, want: []string{"manifests/00-ns.yaml: sha256"}},
		{name: "no lock", damage: func(dir, layer string) {
			os.Remove(filepath.Join(dir, "bundle.lock"))
		}, want: []string{"no bundle.lock"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir, layer := smallBundle(t)
			if c.damage != nil {
				c.damage(dir, layer)
			}
			res, err := verifyBundle(context.Background(), dir)
			if c.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				if res.Files != 1 || res.Blobs < 3 {
					t.Errorf("verified %d files and %d blobs, want 1 and at least 3", res.Files, res.Blobs)
				}
				return
			}
			if err == nil {
				t.Fatal("a damaged bundle verified")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// A missing bundle and the live default are named clearly.
func TestBundleDirErrors(t *testing.T) {
	for _, c := range []struct{ bundle, want string }{
		{liveBundle, "does not look like a booted bootstick"},
		{"/no/such/bundle", "bundle /no/such/bundle: stat"},
	} {
		if _, err := os.Stat("/run/live/medium"); err == nil && c.bundle == liveBundle {
			continue // on a booted stick the live bundle exists
		}
		_, err := bundleDir(context.Background(), c.bundle, defaultPaths(t.TempDir()))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("bundleDir(%s) = %v, want %q", c.bundle, err, c.want)
		}
	}
}

// --bundle X.iso: the ISO's /bundle is mounted read-only (or, on a kernel
// without ISO 9660, copied out) and verifies; a second call finds the
// first's work.
func TestBundleFromISO(t *testing.T) {
	if testing.Short() {
		t.Skip("loop-mounts an ISO (root)")
	}
	dir, _ := smallBundle(t)
	tree := t.TempDir()
	if err := os.Rename(dir, filepath.Join(tree, "bundle")); err != nil {
		t.Fatal(err)
	}
	isoPath := filepath.Join(t.TempDir(), "b.iso")
	if err := iso.Write(context.Background(), iso.Options{Tree: tree, Output: isoPath, Label: "BOOTSTICK"}); err != nil {
		t.Fatal(err)
	}
	p := defaultPaths(t.TempDir())
	p.Run = t.TempDir()
	got, err := bundleDir(context.Background(), isoPath, p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if mounts.Mounted(p.isoMount()) {
			unmount(p.isoMount())
		}
	})
	if _, err := verifyBundle(context.Background(), got); err != nil {
		t.Fatal(err)
	}
	again, err := bundleDir(context.Background(), isoPath, p)
	if err != nil || again != got {
		t.Errorf("second bundleDir = %s, %v; want %s", again, err, got)
	}
	if b, err := openBundle(got); err != nil || len(b.images) != 1 {
		t.Errorf("openBundle: %v, images %v", err, b.images)
	}
}
