package bundle

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/debs"
	"github.com/bootstick/bootstick/internal/recipes"
	"github.com/bootstick/bootstick/internal/toolchain"
)

const hexA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

// fakeResolver stands in for the toolchain and apt.
func fakeResolver() Resolver {
	return Resolver{
		Toolchain: func(ctx context.Context, recipes string) (*toolchain.Manifest, error) {
			return &toolchain.Manifest{
				Go: "go1.26", KubernetesVersion: "v1.34.4",
				Recipes: []toolchain.RecipeRecord{{Name: "kubernetes", Source: "k8s.io/kubernetes@v1.34.4"}},
				Binaries: append([]toolchain.Binary{
					{Name: "kubeadm", Digest: cas.Digest("sha256:" + strings.Repeat("1", 64)), Size: 1},
					{Name: "kubelet", Digest: cas.Digest("sha256:" + strings.Repeat("2", 64)), Size: 2},
					{Name: "kubectl", Digest: cas.Digest("sha256:" + strings.Repeat("3", 64)), Size: 3},
					{Name: "flannel", Digest: cas.Digest("sha256:" + strings.Repeat("5", 64)), Size: 5},
				}, fakeCNIPlugins()...),
				Images: []toolchain.ImageRecord{{Ref: "example.test/pause:1", Digest: cas.Digest("sha256:" + strings.Repeat("4", 64))}},
			}, nil
		},
		Debs:   fakeDebs("1:1.0-1", nil),
		Mirror: func(string) (string, error) { return "http://mirror.invalid/debian", nil },
	}
}

// fakeCNIPlugins are the reference CNI plugins images/recipes.yaml builds
// (its recipe cni-plugins), each with a digest of its own, as the fake
// toolchain gives them.
func fakeCNIPlugins() []toolchain.Binary {
	spec, err := recipes.Load(filepath.Join("..", "..", "images", "recipes.yaml"))
	if err != nil {
		panic(err)
	}
	var out []toolchain.Binary
	for i := range spec.Binaries {
		if spec.Binaries[i].Name != "cni-plugins" {
			continue
		}
		for _, n := range spec.Binaries[i].BinaryNames() {
			out = append(out, toolchain.Binary{Name: n, Digest: cas.DigestOf([]byte(n)), Size: int64(len(n))})
		}
	}
	return out
}

// fakeDebs resolves every package to version, noting the names asked.
func fakeDebs(version string, asked *[]string) func(ctx context.Context, names []string) ([]debs.Package, error) {
	return func(ctx context.Context, names []string) ([]debs.Package, error) {
		if asked != nil {
			*asked = append(*asked, names...)
		}
		var out []debs.Package
		for _, n := range names {
			out = append(out, debs.Package{Name: n, Version: version, Arch: "amd64", SHA256: cas.Digest("sha256:" + hexA)})
		}
		return out, nil
	}
}

func TestShippedBundlesLoad(t *testing.T) {
	for _, f := range []string{"../../bundle/default.yaml", "../../bundle/upstream.yaml"} {
		b, err := Load(f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if b.Kubernetes.Version != "v1.34.4" || b.OS.Suite != "trixie" {
			t.Errorf("%s: got %+v", f, b)
		}
	}
}

func TestDefaultLocks(t *testing.T) {
	b, err := Load("../../bundle/default.yaml")
	if err != nil {
		t.Fatal(err)
	}
	l, err := Resolve(context.Background(), b, nil, fakeResolver())
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Unresolved) != 0 {
		t.Errorf("unresolved: %v", l.Unresolved)
	}
	// kubeadm, kubelet, kubectl, flannel's plugin and the reference CNI
	// plugins; the .debs of containerd and runc.
	if l.Kubernetes.Source != SourceToolchain || len(l.Packages.Binaries) != 4+len(fakeCNIPlugins()) || len(l.Packages.Debs) != 2 {
		t.Errorf("lock: %s", l.Marshal())
	}
	if got := l.Packages.Debs[0].File; got != "containerd_1.0-1_amd64.deb" {
		t.Errorf("deb file %q: the epoch must be dropped", got)
	}
	if len(l.Manifests) == 0 || l.OS.Mirror == "" || l.BundleDigest == "" {
		t.Errorf("lock: %s", l.Marshal())
	}
	// Round trip, strictly.
	back, err := ParseLock("x.lock", l.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	if d := Diff(l, back); len(d) != 0 {
		t.Errorf("round trip differs: %v", d)
	}
	if _, err := ParseLock("x.lock", []byte(`{"apiVersion":"bootstick.dev/v1alpha1","kind":"BundleLock","extra":1}`)); err == nil {
		t.Error("unknown lock field accepted")
	}
}

// TestNewSuiteRelocksPackages: the previous lock's package versions are
// kept within a suite, and all asked again when the suite changes.
func TestNewSuiteRelocksPackages(t *testing.T) {
	b, err := Load("../../bundle/default.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r := fakeResolver()
	first, err := Resolve(context.Background(), b, nil, r)
	if err != nil {
		t.Fatal(err)
	}
	var asked []string
	r.Debs = fakeDebs("2.0-1", &asked)
	if _, err := Resolve(context.Background(), b, first, r); err != nil {
		t.Fatal(err)
	}
	if len(asked) != 0 {
		t.Errorf("the same suite asked apt again for %v", asked)
	}
	old := *first
	old.OS.Suite = "bookworm"
	l, err := Resolve(context.Background(), b, &old, r)
	if err != nil {
		t.Fatal(err)
	}
	if l.Packages.Debs[0].Version != "2.0-1" || l.OS.Packages[0].Version != "2.0-1" {
		t.Errorf("a lock of another suite kept its versions: %+v %+v", l.Packages.Debs[0], l.OS.Packages[0])
	}
}

// The upstream bundle cannot be fetched here: offline, everything else is
// pinned and each URL and image is listed as unresolved.
func TestUpstreamLocksOffline(t *testing.T) {
	b, err := Load("../../bundle/upstream.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r := fakeResolver()
	r.Toolchain = nil
	l, err := Resolve(context.Background(), b, nil, r)
	if err != nil {
		t.Fatal(err)
	}
	if l.Kubernetes.Source != SourceURL || len(l.Kubernetes.Binaries) != 3 || len(l.Images) != 7 {
		t.Fatalf("lock: %s", l.Marshal())
	}
	if len(l.Unresolved) != 10 {
		t.Errorf("want 3 binaries and 7 images unresolved, got %d: %v", len(l.Unresolved), l.Unresolved)
	}
	for _, u := range l.Unresolved {
		if !strings.HasPrefix(u, "kubernetes.binaries[") && !strings.HasPrefix(u, "kubernetes.images[") {
			t.Errorf("unexpected unresolved entry %q", u)
		}
	}
	for _, bin := range l.Packages.Binaries {
		if bin.Dest != "packages" || bin.URL == "" || bin.SHA256 != "" {
			t.Errorf("binary %+v", bin)
		}
	}
	if len(l.Packages.Debs) != 3 || len(l.OS.Packages) == 0 {
		t.Errorf("debs not pinned offline: %s", l.Marshal())
	}

	// Resolving online later pins them; the next offline resolve keeps them.
	r.Download = func(ctx context.Context, url string) (cas.Digest, int64, error) {
		return cas.Digest("sha256:" + hexA), 7, nil
	}
	r.ImageDigest = func(ctx context.Context, ref string) (cas.Digest, error) { return cas.Digest("sha256:" + hexA), nil }
	online, err := Resolve(context.Background(), b, l, r)
	if err != nil || len(online.Unresolved) != 0 {
		t.Fatalf("online: %v %v", err, online.Unresolved)
	}
	r.Download, r.ImageDigest = nil, nil
	again, err := Resolve(context.Background(), b, online, r)
	if err != nil || len(again.Unresolved) != 0 {
		t.Fatalf("offline from lock: %v %v", err, again.Unresolved)
	}
	if d := Diff(online, again); len(d) != 0 {
		t.Errorf("offline relock changed: %v", d)
	}
}

func TestLockKeepsPinnedDebs(t *testing.T) {
	b, err := Load("../../bundle/default.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r := fakeResolver()
	first, err := Resolve(context.Background(), b, nil, r)
	if err != nil {
		t.Fatal(err)
	}
	// apt now offers newer versions; the lock keeps the pinned ones.
	r.Debs = func(ctx context.Context, names []string) ([]debs.Package, error) {
		var out []debs.Package
		for _, n := range names {
			out = append(out, debs.Package{Name: n, Version: "2.0", Arch: "amd64", SHA256: cas.Digest("sha256:" + strings.Repeat("b", 64))})
		}
		return out, nil
	}
	second, err := Resolve(context.Background(), b, first, r)
	if err != nil {
		t.Fatal(err)
	}
	if d := Diff(first, second); len(d) != 0 {
		t.Errorf("pinned versions moved: %v", d)
	}
	fresh, _ := Resolve(context.Background(), b, nil, r)
	d := Diff(first, fresh)
	if len(d) == 0 || !strings.Contains(strings.Join(d, "\n"), "packages/containerd_2.0_amd64.deb: new") {
		t.Errorf("diff: %v", d)
	}
}

func write(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const head = "apiVersion: bootstick.dev/v1alpha1\nkind: Bundle\n"

func TestBadBundles(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "m"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, dir, "recipes.yaml", "x")
	good := "kubernetes: {version: v1.34.4, recipes: recipes.yaml}\nmanifests: {dir: m}\n"
	for _, tc := range []struct{ name, body, want string }{
		{"unknown field", good + "extra: 1\n", `unknown field "extra"`},
		{"unknown nested field", "kubernetes: {version: v1.34.4, recipes: recipes.yaml, source: x}\nmanifests: {dir: m}\n", "source"},
		{"no kubernetes source", "kubernetes: {version: v1.34.4}\nmanifests: {dir: m}\n", "kubernetes.recipes: Required"},
		{"bad version", "kubernetes: {version: 1.34, recipes: recipes.yaml}\nmanifests: {dir: m}\n", "kubernetes.version: Invalid"},
		{"missing recipes", "kubernetes: {version: v1.34.4, recipes: nope.yaml}\nmanifests: {dir: m}\n", "kubernetes.recipes: Not found"},
		{"missing manifests", "kubernetes: {version: v1.34.4, recipes: recipes.yaml}\nmanifests: {dir: nope}\n", "manifests.dir: Not found"},
		{"both sources", "kubernetes: {version: v1.34.4, recipes: recipes.yaml, binaries: [{url: 'https://h.invalid/kubeadm'}]}\nmanifests: {dir: m}\n", "kubernetes.binaries: Forbidden"},
		{"bad sha256", good + "files: [{url: 'https://h.invalid/a.img', sha256: xyz}]\n", "files[0].sha256: Invalid"},
		{"url scheme", good + "files: [{url: 'ftp://h.invalid/a.img', sha256: " + hexA + "}]\n", "files[0].url: Invalid"},
		{"no url or path", good + "files: [{name: a.img}]\n", "files[0].url: Required"},
		{"bad dest", good + "files: [{url: 'https://h.invalid/a.img', sha256: " + hexA + ", dest: etc}]\n", `files[0].dest: Unsupported value: "etc"`},
		{"duplicate file", good + "files: [{url: 'https://h.invalid/a.img', sha256: " + hexA + "}, {url: 'https://h.invalid/x/a.img', sha256: " + hexA + "}]\n", "files[1].name: Duplicate"},
		{"image digest", good + "images: [{ref: 'h.invalid/app:1', digest: sha256:zz}]\n", "images[0].digest: Invalid"},
		{"image by digest only", good + "images: [{ref: 'h.invalid/a@sha256:" + hexA + "'}]\n", "images[0].ref: Invalid"},
		{"duplicate image", good + "images: [{ref: 'h.invalid/app:1'}, {ref: 'h.invalid/app:1'}]\n", "images[1].ref: Duplicate"},
		{"bad deb", good + "packages: {debs: [Bad_Name]}\n", "packages.debs[0]: Invalid"},
		{"bad level", good + "os: {compressionLevel: 40}\n", "os.compressionLevel: Invalid"},
		{"security mirror scheme", good + "os: {securityMirror: 'ftp://h.invalid/debian-security'}\n", "os.securityMirror: Invalid"},
		{"security mirror of unstable", good + "os: {suite: sid, securityMirror: 'http://h.invalid/debian-security'}\n", "os.securityMirror: Forbidden: suite sid has no -security suite"},
		{"wrong type", good + "os: {packages: 3}\n", "line 5: os.packages: must be a list, not a single value"},
		{"wrong kind", "apiVersion: bootstick.dev/v1alpha1\nkind: Site\n", "kind"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := tc.body
			if !strings.HasPrefix(body, "apiVersion") {
				body = head + body
			}
			f := write(t, dir, "b.yaml", body)
			_, err := Load(f)
			if err == nil {
				t.Fatalf("accepted:\n%s", body)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "b.yaml") {
				t.Errorf("error %q\nwant it to name the file and contain %q", err, tc.want)
			}
		})
	}
}

func TestEveryProblemAtOnce(t *testing.T) {
	dir := t.TempDir()
	f := write(t, dir, "b.yaml", head+"name: Bad Name\nkubernetes: {version: x}\nmanifests: {dir: nope}\nos: {suite: 'A B'}\n")
	_, err := Load(f)
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"name: Invalid", "kubernetes.version", "kubernetes.recipes", "manifests.dir", "os.suite", "line 3"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

// A file over 4 GiB cannot go on an ISO 9660 stick: the lock step says so
// before hashing it (the file is sparse, so this costs nothing).
func TestFileOver4GiB(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "m"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, dir, "m/a.yaml", "a: 1\n")
	write(t, dir, "recipes.yaml", "x")
	big := filepath.Join(dir, "big.img")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(MaxFileSize + 1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	bf := write(t, dir, "b.yaml", head+"kubernetes: {version: v1.34.4, recipes: recipes.yaml}\nmanifests: {dir: m}\nfiles: [{path: big.img}]\n")
	b, err := Load(bf)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Resolve(context.Background(), b, nil, fakeResolver())
	var tl *TooLargeError
	if !errors.As(err, &tl) || !strings.Contains(err.Error(), "files[0]") || !strings.Contains(err.Error(), "big.img") {
		t.Fatalf("got %v", err)
	}
}

func TestLockPath(t *testing.T) {
	if got := LockPath("bundle/default.yaml"); got != "bundle/default.lock" {
		t.Error(got)
	}
	if !reflect.DeepEqual(Dests, []string{"os-images", "packages", "files"}) {
		t.Error(Dests)
	}
}

func TestPayloadPathClash(t *testing.T) {
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "m"), 0o755)
	write(t, dir, "m/a.yaml", "a: 1\n")
	write(t, dir, "recipes.yaml", "x")
	write(t, dir, "kubeadm", "not kubeadm")
	bf := write(t, dir, "b.yaml", head+"kubernetes: {version: v1.34.4, recipes: recipes.yaml}\nmanifests: {dir: m}\npackages: {binaries: [kubeadm]}\nfiles: [{path: kubeadm, dest: packages}]\n")
	b, err := Load(bf)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Resolve(context.Background(), b, nil, fakeResolver())
	if err == nil || !strings.Contains(err.Error(), "/bundle/packages/kubeadm") {
		t.Fatalf("got %v", err)
	}
}

// hostMirrors stands in for the build host's apt configuration: the
// release at one mirror, its security suite at the security archive. It
// notes the suites asked.
func hostMirrors(asked *[]string) func(string) (string, error) {
	return func(suite string) (string, error) {
		*asked = append(*asked, suite)
		if strings.HasSuffix(suite, "-security") {
			return "http://security.mirror.invalid/debian-security", nil
		}
		return "http://mirror.invalid/debian", nil
	}
}

// TestSecuritySuiteLocked: the lock names the security mirror beside the
// mirror, and a package whose version came from trixie-security says so;
// the lock reads back the same.
func TestSecuritySuiteLocked(t *testing.T) {
	b, err := Load("../../bundle/default.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r := fakeResolver()
	var asked []string
	r.Mirror = hostMirrors(&asked)
	r.Debs = func(ctx context.Context, names []string) ([]debs.Package, error) {
		var out []debs.Package
		for _, n := range names {
			p := debs.Package{Name: n, Version: "1.0-1", Arch: "amd64", SHA256: cas.Digest("sha256:" + hexA), Suite: "trixie"}
			if n == "curl" {
				p.Version, p.Suite = "8.14.1-2+deb13u2", "trixie-security"
			}
			out = append(out, p)
		}
		return out, nil
	}
	l, err := Resolve(context.Background(), b, nil, r)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(asked, []string{"trixie", "trixie-security"}) {
		t.Errorf("asked the host for %v", asked)
	}
	if l.OS.Mirror != "http://mirror.invalid/debian" || l.OS.SecurityMirror != "http://security.mirror.invalid/debian-security" {
		t.Errorf("os: %+v", l.OS)
	}
	data := string(l.Marshal())
	for _, want := range []string{`"securityMirror": "http://security.mirror.invalid/debian-security"`, `"suite": "trixie-security"`} {
		if !strings.Contains(data, want) {
			t.Errorf("lock lacks %s:\n%s", want, data)
		}
	}
	back, err := ParseLock("x.lock", l.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back.OS, l.OS) {
		t.Errorf("round trip: %+v\nwant %+v", back.OS, l.OS)
	}
}

// TestNewSecurityMirrorRelocksPackages: a lock made from another security
// mirror, or before the security suite was read, is made again, and
// --locked would name the change.
func TestNewSecurityMirrorRelocksPackages(t *testing.T) {
	b, err := Load("../../bundle/default.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r := fakeResolver()
	var hosts []string
	r.Mirror = hostMirrors(&hosts)
	first, err := Resolve(context.Background(), b, nil, r)
	if err != nil {
		t.Fatal(err)
	}
	for name, sec := range map[string]string{"another security mirror": "http://other.invalid/debian-security", "none (an older lock)": ""} {
		t.Run(name, func(t *testing.T) {
			old := *first
			old.OS.SecurityMirror = sec
			var asked []string
			r.Debs = fakeDebs("2.0-1", &asked)
			l, err := Resolve(context.Background(), b, &old, r)
			if err != nil {
				t.Fatal(err)
			}
			if len(asked) == 0 || l.OS.Packages[0].Version != "2.0-1" {
				t.Errorf("kept the versions of a lock from other sources: %+v", l.OS.Packages[0])
			}
			if d := strings.Join(Diff(&old, l), "\n"); !strings.Contains(d, "os.securityMirror") {
				t.Errorf("diff does not name the security mirror:\n%s", d)
			}
		})
	}
}

// TestBundleSecurityMirror: the bundle's own mirrors are used as given;
// the host is asked for neither.
func TestBundleSecurityMirror(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "m"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, dir, "m/a.yaml", "a: 1\n")
	write(t, dir, "recipes.yaml", "x")
	bf := write(t, dir, "b.yaml", head+"kubernetes: {version: v1.34.4, recipes: recipes.yaml}\nmanifests: {dir: m}\n"+
		"os: {suite: trixie, mirror: 'http://user.invalid/debian', securityMirror: 'http://user.invalid/debian-security'}\n")
	b, err := Load(bf)
	if err != nil {
		t.Fatal(err)
	}
	r := fakeResolver()
	r.Mirror = func(suite string) (string, error) { return "", errors.New("the host was asked for " + suite) }
	l, err := Resolve(context.Background(), b, nil, r)
	if err != nil {
		t.Fatal(err)
	}
	if l.OS.Mirror != "http://user.invalid/debian" || l.OS.SecurityMirror != "http://user.invalid/debian-security" {
		t.Errorf("os: %+v", l.OS)
	}
}
