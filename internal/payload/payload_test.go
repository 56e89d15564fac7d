package payload

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bootstick/bootstick/internal/bundle"
	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/registry"
	"github.com/bootstick/bootstick/internal/testkit"
	"github.com/bootstick/bootstick/internal/toolchain"
	"github.com/bootstick/bootstick/internal/zstdblob"
)

func setup(t *testing.T) (*cas.Store, *bundle.Bundle, *bundle.Lock) {
	t.Helper()
	store, err := cas.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tc, err := testkit.Toolchain(store, 4096, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "os.img"), []byte("an OS image"), 0o644)
	bf, err := testkit.Bundle(dir, testkit.Manifests, "files: [{path: os.img}]\n")
	if err != nil {
		t.Fatal(err)
	}
	b, err := bundle.Load(bf)
	if err != nil {
		t.Fatal(err)
	}
	l, err := bundle.Resolve(context.Background(), b, nil, bundle.Resolver{
		Toolchain: func(context.Context, string) (*toolchain.Manifest, error) { return &tc.Manifest, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	// Local files enter the cache at build time.
	if _, _, err := store.PutFile(filepath.Join(dir, "os.img")); err != nil {
		t.Fatal(err)
	}
	return store, b, l
}

func TestStage(t *testing.T) {
	store, b, l := setup(t)
	siteDir := t.TempDir()
	os.MkdirAll(filepath.Join(siteDir, "secrets"), 0o755)
	os.WriteFile(filepath.Join(siteDir, "site.yaml"), []byte("kind: Site\n"), 0o644)
	os.WriteFile(filepath.Join(siteDir, "secrets", "w.yaml"), []byte("username: a\n"), 0o600)
	out := filepath.Join(t.TempDir(), "bundle")
	st, err := Stage(context.Background(), Options{Store: store, Lock: l, Bundle: b, Dir: out,
		Site: filepath.Join(siteDir, "site.yaml"), SiteFiles: []string{"secrets/w.yaml"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"bundle.lock", "registry/index.json", "registry/oci-layout", "manifests/10-app.yaml",
		"packages/kubeadm", "packages/kubelet", "packages/kubectl", "os-images/os.img", "os-images/os.img.sha256",
		"site/site.yaml", "site/secrets/w.yaml"} {
		if _, err := os.Stat(filepath.Join(out, p)); err != nil {
			t.Error(err)
		}
	}
	// The site's files may hold passwords: only root reads them.
	for p, want := range map[string]os.FileMode{"site": 0o700, "site/site.yaml": 0o600, "site/secrets": 0o700, "site/secrets/w.yaml": 0o600} {
		if fi, err := os.Stat(filepath.Join(out, p)); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v (%v), want %v", p, fi.Mode().Perm(), err, want)
		}
	}
	// The firstboot registry serves the layout, and finds nothing corrupt.
	srv, err := registry.Open(filepath.Join(out, "registry"), registry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := srv.Images(); len(got) != len(testkit.Images) {
		t.Errorf("registry images %v", got)
	}
	if bad := srv.Corrupted(); len(bad) != 0 {
		t.Errorf("corrupted: %v", bad)
	}
	// Seven images share one base layer: it is stored once.
	if st.Images != 7 || st.RegistryBytes >= st.ImageBytes || st.Blobs != 1+7*3 {
		t.Errorf("stats %+v", st)
	}
	size, _ := testkit.TreeSize(filepath.Join(out, "registry", "blobs"))
	if size != st.RegistryBytes {
		t.Errorf("blobs hold %d bytes, stats say %d", size, st.RegistryBytes)
	}
	// The staged lock is the lock.
	data, _ := os.ReadFile(filepath.Join(out, "bundle.lock"))
	back, err := bundle.ParseLock("bundle.lock", data)
	if err != nil || len(bundle.Diff(l, back)) != 0 {
		t.Errorf("staged lock differs: %v", err)
	}
}

// TestStageCompressed: a lock whose binaries have zstd copies (as mkusb
// resolves it) stages each copy as NAME.zst with the copy's digest and
// nothing under the binary's own name; the copy unpacks to the binary.
func TestStageCompressed(t *testing.T) {
	store, b, _ := setup(t)
	tc, err := testkit.Toolchain(store, 4096, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l, err := bundle.Resolve(ctx, b, nil, bundle.Resolver{
		Toolchain: func(context.Context, string) (*toolchain.Manifest, error) { return &tc.Manifest, nil },
		Compress: func(ctx context.Context, f bundle.LockedFile) (bundle.Compressed, error) {
			c, err := zstdblob.Of(ctx, store, f.SHA256)
			return bundle.Compressed{SHA256: c.SHA256, Size: c.Size}, err
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "bundle")
	if _, err := Stage(ctx, Options{Store: store, Lock: l, Bundle: b, Dir: out}); err != nil {
		t.Fatal(err)
	}
	for _, f := range l.Packages.Binaries {
		if f.Zstd == nil {
			t.Fatalf("%s: no zstd copy in the lock", f.Name)
		}
		if _, err := os.Stat(filepath.Join(out, "packages", f.Name)); err == nil {
			t.Errorf("packages/%s is staged as it is, beside its copy", f.Name)
		}
		p := filepath.Join(out, "packages", f.Name+".zst")
		if d, n, err := cas.HashFile(p); err != nil || d != f.Zstd.SHA256 || n != f.Zstd.Size {
			t.Errorf("packages/%s.zst: %s %d %v; the lock says %s %d", f.Name, d, n, err, f.Zstd.SHA256, f.Zstd.Size)
		}
		raw, err := exec.Command("zstd", "-q", "-d", "-c", p).Output()
		if err != nil || cas.DigestOf(raw) != f.SHA256 {
			t.Errorf("packages/%s.zst unpacks to %s (%v), not the binary %s", f.Name, cas.DigestOf(raw), err, f.SHA256)
		}
	}
	if got := l.PayloadFiles()["packages/kubeadm.zst"]; got == "" {
		t.Errorf("the lock's payload files (the boot-time check's list) lack packages/kubeadm.zst: %v", l.PayloadFiles())
	}
}

func TestStageRefusesCorruptCache(t *testing.T) {
	store, b, l := setup(t)
	bin := l.Packages.Binaries[0].SHA256
	p := store.BlobPath(bin)
	os.Chmod(p, 0o644)
	if err := os.WriteFile(p, []byte("tampered"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Stage(context.Background(), Options{Store: store, Lock: l, Bundle: b, Dir: filepath.Join(t.TempDir(), "b")})
	if err == nil || !strings.Contains(err.Error(), "corrupt") || !strings.Contains(err.Error(), string(bin)) {
		t.Fatalf("got %v", err)
	}
	if store.Has(bin) {
		t.Error("the corrupt blob stayed in the cache")
	}
}

func TestStageRefusesChangedManifest(t *testing.T) {
	store, b, l := setup(t)
	if err := os.WriteFile(filepath.Join(b.Dir, "manifests", "10-app.yaml"), []byte("changed: true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Stage(context.Background(), Options{Store: store, Lock: l, Bundle: b, Dir: filepath.Join(t.TempDir(), "b")})
	if err == nil || !strings.Contains(err.Error(), "changed since it was locked") || !strings.Contains(err.Error(), "10-app.yaml") {
		t.Fatalf("got %v", err)
	}
}

func TestStageRefusesSiteFilesOutside(t *testing.T) {
	store, b, l := setup(t)
	site := filepath.Join(t.TempDir(), "site.yaml")
	os.WriteFile(site, []byte("x"), 0o644)
	_, err := Stage(context.Background(), Options{Store: store, Lock: l, Bundle: b, Dir: filepath.Join(t.TempDir(), "b"),
		Site: site, SiteFiles: []string{"../etc/shadow"}})
	if err == nil || !strings.Contains(err.Error(), "outside") {
		t.Fatalf("got %v", err)
	}
}
