package stick

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bootstick/bootstick/internal/bundle"
	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/completeness"
	"github.com/bootstick/bootstick/internal/debs"
	"github.com/bootstick/bootstick/internal/fetch"
	"github.com/bootstick/bootstick/internal/osimage"
	"github.com/bootstick/bootstick/internal/site"
	"github.com/bootstick/bootstick/internal/testkit"
	"github.com/bootstick/bootstick/internal/toolchain"
)

var epoch = time.Unix(1_700_000_000, 0).UTC()

// env is a small build: the stand-in toolchain, a tiny fake OS, the
// repository's overlay, no Debian packages.
type env struct {
	store  *cas.Store
	tc     *toolchain.Result
	dir    string // the bundle folder
	bundle string
	out    string // output folder
	osDir  string
	builds int
}

func newEnv(t testing.TB, extra string) *env {
	t.Helper()
	store, err := cas.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tc, err := testkit.Toolchain(store, 64<<10, 256<<10)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{store: store, tc: tc, dir: t.TempDir(), out: t.TempDir(), osDir: t.TempDir()}
	e.bundle, err = testkit.Bundle(e.dir, testkit.Manifests, extra)
	if err != nil {
		t.Fatal(err)
	}
	for name, size := range map[string]int{"vmlinuz": 8 << 10, "initrd.img": 16 << 10, "filesystem.squashfs": 64 << 10} {
		data := bytes.Repeat([]byte(name), size/len(name))
		if err := os.WriteFile(filepath.Join(e.osDir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

func (e *env) options(out string) Options {
	return Options{
		Bundle: e.bundle, Output: filepath.Join(e.out, out), Store: e.store, Epoch: epoch,
		Overlay: "../../overlay",
		Toolchain: func(ctx context.Context, recipes string) (*toolchain.Result, error) {
			e.builds++
			return e.tc, nil
		},
		OS: func(ctx context.Context, r OSRequest) (OSResult, error) {
			return OSResult{Kernel: filepath.Join(e.osDir, "vmlinuz"), Initrd: filepath.Join(e.osDir, "initrd.img"),
				Squashfs: filepath.Join(e.osDir, "filesystem.squashfs")}, nil
		},
		Debs: func(ctx context.Context, names []string) ([]debs.Package, error) {
			var out []debs.Package
			for _, n := range names {
				out = append(out, debs.Package{Name: n, Version: "1.0-1", Arch: "amd64", SHA256: cas.DigestOf([]byte(n))})
			}
			return out, nil
		},
		FetchDebs: func(ctx context.Context, s *cas.Store, p []debs.Package, w string) error { return nil },
		Mirror:    func(string) (string, error) { return "http://deb.test/debian", nil },
		KubeadmImages: func(ctx context.Context, cfg []byte) ([]string, error) {
			return testkit.Images, nil
		},
	}
}

func TestBuildReproducibleAndInspect(t *testing.T) {
	e := newEnv(t, "")
	ctx := context.Background()
	r1, err := Build(ctx, e.options("a.iso"))
	if err != nil {
		t.Fatal(err)
	}
	if !r1.LockChanged {
		t.Error("the first build wrote no lock")
	}
	// A second build from the same lock, locked, gives the same bytes.
	o := e.options("b.iso")
	o.Locked = true
	r2, err := Build(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if r2.LockChanged {
		t.Error("a locked build changed the lock")
	}
	a, _ := os.ReadFile(r1.Output)
	b, _ := os.ReadFile(r2.Output)
	if len(a) == 0 || !bytes.Equal(a, b) {
		t.Fatalf("two builds from one lock differ (%d and %d bytes)", len(a), len(b))
	}

	rep, err := Inspect(r1.Output)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Label != "TEST" || len(rep.Lock.Images) != len(testkit.Images) || rep.Build == nil || len(rep.Build.Live) != 4 {
		t.Errorf("report %+v", rep)
	}
	if len(rep.Boot) != 2 || rep.Boot[0].Platform != "BIOS" || rep.Boot[1].Platform != "UEFI" {
		t.Errorf("boot entries %+v", rep.Boot)
	}
	if len(rep.Partitions) < 1 || !rep.Partitions[0].Active {
		t.Errorf("no hybrid MBR: %+v", rep.Partitions)
	}
	if rep.Sizes["bundle/registry"] != r1.Payload.RegistryBytes+int64(len(mustRead(t, r1.Output, "bundle/registry/index.json")))+30 {
		t.Logf("sizes %v, payload %+v", rep.Sizes, r1.Payload)
	}
	for _, f := range []string{"live/vmlinuz", "live/initrd.img", "live/filesystem.squashfs", "live/layer.squashfs",
		"bundle/manifests/10-app.yaml", "bundle/packages/kubeadm", "bundle/registry/oci-layout"} {
		if rep.Sizes[strings.SplitN(f, "/", 3)[0]] == 0 {
			t.Errorf("no size for %s", f)
		}
	}
	vr, err := Verify(ctx, r1.Output, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(vr.Problems) != 0 || vr.Blobs != r1.Payload.Blobs || vr.Files != 9 {
		t.Errorf("verify: %+v (payload %+v)", vr, r1.Payload)
	}

	// xorriso agrees: BIOS and UEFI entries and the MBR.
	rep2, err := exec.Command("xorriso", "-indev", r1.Output, "-report_el_torito", "plain").CombinedOutput()
	if err != nil {
		t.Fatalf("xorriso: %v\n%s", err, rep2)
	}
	for _, want := range []string{"El Torito boot img :   1  BIOS", "El Torito boot img :   2  UEFI"} {
		if !bytes.Contains(rep2, []byte(want)) {
			t.Errorf("xorriso lacks %q:\n%s", want, rep2)
		}
	}
}

func mustRead(t *testing.T, iso, p string) []byte {
	fsys, done, err := isoFS(iso)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	b, err := readAll(fsys, p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestVerifyFindsCorruption(t *testing.T) {
	e := newEnv(t, "")
	r, err := Build(context.Background(), e.options("a.iso"))
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(r.Output)
	// Flip bytes inside kubeadm's content (its first bytes are a marker;
	// the payload carries it in zstd, whose block of so little stays raw).
	i := bytes.Index(data, []byte("#!/bin/sh\necho kubeadm\n"))
	if i < 0 {
		t.Fatal("kubeadm not found in the image")
	}
	data[i+100] ^= 0xff
	bad := filepath.Join(e.out, "bad.iso")
	os.WriteFile(bad, data, 0o644)
	vr, err := Verify(context.Background(), bad, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(vr.Problems) == 0 || !strings.Contains(strings.Join(vr.Problems, "\n"), "bundle/packages/kubeadm.zst: sha256") {
		t.Errorf("problems %v", vr.Problems)
	}
}

func noISO(t *testing.T, dir string) {
	t.Helper()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.Contains(e.Name(), ".iso") {
			t.Errorf("left behind in %s: %s", dir, e.Name())
		}
	}
}

func TestMissingImage(t *testing.T) {
	e := newEnv(t, "")
	os.WriteFile(filepath.Join(e.dir, "manifests", "30-extra.yaml"), []byte(`apiVersion: v1
kind: Pod
metadata: {name: extra, namespace: demo}
spec:
  containers: [{name: x, image: `+testkit.Registry+`/not-built:v9}]
`), 0o644)
	_, err := Build(context.Background(), e.options("a.iso"))
	var me *completeness.MissingError
	if !errors.As(err, &me) {
		t.Fatalf("got %v", err)
	}
	if !strings.Contains(err.Error(), testkit.Registry+"/not-built:v9") || !strings.Contains(err.Error(), "manifests/30-extra.yaml: Pod demo/extra") {
		t.Errorf("error %v", err)
	}
	noISO(t, e.out)
}

func TestUnknownFieldInBundle(t *testing.T) {
	e := newEnv(t, "colour: blue\n")
	_, err := Build(context.Background(), e.options("a.iso"))
	if err == nil || !strings.Contains(err.Error(), `unknown field "colour"`) || !strings.Contains(err.Error(), "bundle.yaml") {
		t.Fatalf("got %v", err)
	}
	noISO(t, e.out)
}

// fileServer serves files with Range support and can drop a download half
// way once.
type fileServer struct {
	mu     sync.Mutex
	files  map[string][]byte
	gets   map[string]int
	ranges map[string]int
	cut    map[string]bool
}

func (s *fileServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	data, ok := s.files[r.URL.Path]
	if r.Method == http.MethodGet {
		s.gets[r.URL.Path]++
	}
	if r.Header.Get("Range") != "" {
		s.ranges[r.URL.Path]++
	}
	cut := s.cut[r.URL.Path] && r.Method == http.MethodGet
	delete(s.cut, r.URL.Path)
	s.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	if cut {
		w.Header().Set("Content-Length", fmt.Sprint(len(data)))
		w.WriteHeader(http.StatusOK)
		w.Write(data[:len(data)/2])
		w.(http.Flusher).Flush()
		if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
			c.Close()
		}
		return
	}
	http.ServeContent(w, r, r.URL.Path, time.Unix(0, 0), bytes.NewReader(data))
}

func serve(t testing.TB, files map[string][]byte) (*fileServer, string) {
	s := &fileServer{files: files, gets: map[string]int{}, ranges: map[string]int{}, cut: map[string]bool{}}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return s, ts.URL
}

func TestWrongSHA256(t *testing.T) {
	img := []byte("a compute node OS image\n")
	_, url := serve(t, map[string][]byte{"/node.qcow2": img})
	wrong := strings.Repeat("ab", 32)
	e := newEnv(t, fmt.Sprintf("files: [{url: %q, sha256: %s}]\n", url+"/node.qcow2", wrong))
	_, err := Build(context.Background(), e.options("a.iso"))
	var me *fetch.MismatchError
	if !errors.As(err, &me) {
		t.Fatalf("got %v", err)
	}
	got := cas.DigestOf(img)
	for _, want := range []string{url + "/node.qcow2", wrong, got.Hex()} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if e.store.Has(got) || e.store.Has(cas.Digest("sha256:"+wrong)) {
		t.Error("the bad file is in the cache")
	}
	noISO(t, e.out)
}

// A build cut off in the middle of a download resumes from the cache: the
// finished file is not fetched again and the cut one continues where it
// stopped.
func TestInterruptedBuildResumes(t *testing.T) {
	small := []byte("small file\n")
	big := bytes.Repeat([]byte("0123456789"), 200_000)
	srv, url := serve(t, map[string][]byte{"/a.raw": small, "/b.qcow2": big})
	srv.cut["/b.qcow2"] = true
	e := newEnv(t, fmt.Sprintf("files:\n- {url: %q, sha256: %s}\n- {url: %q, sha256: %s}\n",
		url+"/a.raw", cas.DigestOf(small).Hex(), url+"/b.qcow2", cas.DigestOf(big).Hex()))
	if _, err := Build(context.Background(), e.options("a.iso")); err == nil {
		t.Fatal("the interrupted build succeeded")
	}
	noISO(t, e.out)
	r, err := Build(context.Background(), e.options("a.iso"))
	if err != nil {
		t.Fatal(err)
	}
	if srv.gets["/a.raw"] != 1 || srv.ranges["/b.qcow2"] != 1 {
		t.Errorf("gets %v ranges %v: want a.raw fetched once and b.qcow2 resumed", srv.gets, srv.ranges)
	}
	vr, err := Verify(context.Background(), r.Output, nil)
	if err != nil || len(vr.Problems) > 0 {
		t.Fatalf("%v %v", err, vr.Problems)
	}
}

func TestLockedRefusesChanges(t *testing.T) {
	e := newEnv(t, "")
	ctx := context.Background()
	o := e.options("a.iso")
	o.Locked = true
	if _, err := Build(ctx, o); err == nil || !strings.Contains(err.Error(), "no lock") {
		t.Fatalf("locked build with no lock: %v", err)
	}
	if _, err := Build(ctx, e.options("a.iso")); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(e.dir, "manifests", "00-namespace.yaml"), []byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: other}\n"), 0o644)
	_, err := Build(ctx, o)
	if err == nil || !strings.Contains(err.Error(), "file manifests/00-namespace.yaml") {
		t.Fatalf("got %v", err)
	}
	r, err := Build(ctx, e.options("a.iso"))
	if err != nil || !r.LockChanged {
		t.Fatalf("unlocked rebuild: %v (lock changed %v)", err, r != nil && r.LockChanged)
	}
}

// TestSiteObjects renders a site for the completeness check: its objects
// (Secrets, BareMetalHosts, the Provisioning) run no containers of their own.
func TestSiteObjects(t *testing.T) {
	s, err := site.Load("../render/testdata/site3.yaml", site.Options{})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := siteObjects(s, []osimage.Image{{Name: "ubuntu-22.04", File: "ubuntu-22.04.raw", SHA256: strings.Repeat("5", 64), Format: "raw"}})
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, o := range objs {
		kind, _ := o["kind"].(string)
		kinds[kind]++
		if uses := completeness.ObjectImages("site", o); len(uses) != 0 {
			t.Errorf("site object %s runs images %v", kind, uses)
		}
	}
	if kinds["BareMetalHost"] == 0 || kinds["Secret"] == 0 {
		t.Errorf("rendered kinds %v, want BareMetalHosts and Secrets", kinds)
	}
}

// TestSecurityUpdateKeepsLockedOS: the OS is built with the locked
// version of each package from the suite and its -security; a security
// update the mirror serves later changes neither the lock nor the
// versions a locked build installs.
func TestSecurityUpdateKeepsLockedOS(t *testing.T) {
	e := newEnv(t, "")
	ctx := context.Background()
	var reqs []OSRequest
	withOS := func(o Options) Options {
		build := o.OS
		o.OS = func(ctx context.Context, r OSRequest) (OSResult, error) {
			reqs = append(reqs, r)
			return build(ctx, r)
		}
		o.Mirror = func(suite string) (string, error) {
			if strings.HasSuffix(suite, "-security") {
				return "http://security.deb.test/debian-security", nil
			}
			return "http://deb.test/debian", nil
		}
		return o
	}
	if _, err := Build(ctx, withOS(e.options("a.iso"))); err != nil {
		t.Fatal(err)
	}
	o := withOS(e.options("b.iso"))
	o.Locked = true
	o.Debs = func(ctx context.Context, names []string) ([]debs.Package, error) {
		var out []debs.Package
		for _, n := range names {
			out = append(out, debs.Package{Name: n, Version: "1.0-1+deb12u1", Arch: "amd64", SHA256: cas.DigestOf([]byte(n + "+u1")), Suite: "bookworm-security"})
		}
		return out, nil
	}
	r, err := Build(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if r.LockChanged || r.Lock.OS.SecurityMirror != "http://security.deb.test/debian-security" {
		t.Errorf("lock changed %v, os %+v", r.LockChanged, r.Lock.OS)
	}
	if len(reqs) != 2 {
		t.Fatalf("%d OS builds", len(reqs))
	}
	for _, req := range reqs {
		if req.SecurityMirror != "http://security.deb.test/debian-security" || !slices.ContainsFunc(req.Locked, func(p debs.Package) bool {
			return p.String() == "openssh-server=1.0-1"
		}) {
			t.Errorf("OS request %+v: want the locked openssh-server=1.0-1 from both mirrors", req)
		}
	}
}

// TestStoreFile: a pinned binary the cache lacks (a release by URL, one
// kept as a file beside the bundle) is put into it before its zstd copy is
// made, checked against its pin; a toolchain binary the cache lacks is
// named with what to run.
func TestStoreFile(t *testing.T) {
	e := newEnv(t, "")
	b, err := bundle.Load(e.bundle)
	if err != nil {
		t.Fatal(err)
	}
	release := []byte("a kubelet from a release URL")
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(release) }))
	defer ts.Close()
	ctx := context.Background()
	o := e.options("unused.iso")
	byURL := bundle.LockedFile{Name: "kubelet", Source: bundle.SourceURL, URL: ts.URL + "/kubelet", SHA256: cas.DigestOf(release), Size: int64(len(release))}
	if err := storeFile(ctx, o, b, byURL); err != nil || !e.store.Has(byURL.SHA256) {
		t.Errorf("by URL: %v, stored %v", err, e.store.Has(byURL.SHA256))
	}
	wrong := byURL
	wrong.SHA256 = cas.DigestOf([]byte("another kubelet"))
	if err := storeFile(ctx, o, b, wrong); err == nil || e.store.Has(wrong.SHA256) {
		t.Errorf("by URL, another sha256: %v", err)
	}
	local := []byte("a kubeadm beside the bundle")
	if err := os.WriteFile(filepath.Join(e.dir, "kubeadm"), local, 0o644); err != nil {
		t.Fatal(err)
	}
	beside := bundle.LockedFile{Name: "kubeadm", Source: bundle.SourceLocal, Path: "kubeadm", SHA256: cas.DigestOf(local)}
	if err := storeFile(ctx, o, b, beside); err != nil || !e.store.Has(beside.SHA256) {
		t.Errorf("beside the bundle: %v", err)
	}
	changed := beside
	changed.Name, changed.Path, changed.SHA256 = "kubectl", "kubeadm", cas.DigestOf([]byte("locked kubectl"))
	if err := storeFile(ctx, o, b, changed); err == nil || !strings.Contains(err.Error(), "changed since it was locked") {
		t.Errorf("a changed file beside the bundle: %v", err)
	}
	gone := bundle.LockedFile{Name: "kubectl", Source: bundle.SourceToolchain, SHA256: cas.DigestOf([]byte("never built"))}
	if err := storeFile(ctx, o, b, gone); err == nil || !strings.Contains(err.Error(), "run mkusb toolchain") {
		t.Errorf("a toolchain binary the cache lacks: %v", err)
	}
}
