package kindcluster

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/bootstick/bootstick/internal/ociarchive"
	"github.com/bootstick/bootstick/internal/registry"
)

// toolchainLayout is the OCI layout `make toolchain` leaves.
const toolchainLayout = "/var/cache/bootstick/toolchain/current/oci"

// randomLayout writes random images into a fresh OCI layout, named as
// mkusb names them (annotation io.containerd.image.name).
func randomLayout(t *testing.T, refs ...string) (string, map[string]v1.Image) {
	t.Helper()
	dir := t.TempDir()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	images := map[string]v1.Image{}
	for i, ref := range refs {
		img, err := random.Image(512, int64(i+1))
		if err != nil {
			t.Fatal(err)
		}
		if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{registry.AnnotationImageName: ref})); err != nil {
			t.Fatal(err)
		}
		images[ref] = img
	}
	return dir, images
}

// checkSame fails unless got has want's manifest's config and layers.
func checkSame(t *testing.T, ref string, got, want v1.Image) {
	t.Helper()
	gc, err := got.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	wc, err := want.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	if gc != wc {
		t.Errorf("%s: config %s, want %s", ref, gc, wc)
	}
	gl, err := got.Layers()
	if err != nil {
		t.Fatal(err)
	}
	wl, err := want.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(gl) != len(wl) {
		t.Fatalf("%s: %d layers, want %d", ref, len(gl), len(wl))
	}
	for i := range gl {
		gd, _ := gl[i].Digest()
		wd, _ := wl[i].Digest()
		gdiff, _ := gl[i].DiffID()
		wdiff, _ := wl[i].DiffID()
		if gd != wd || gdiff != wdiff {
			t.Errorf("%s: layer %d is %s (diff %s), want %s (diff %s)", ref, i, gd, gdiff, wd, wdiff)
		}
	}
}

func TestWriteImageArchive(t *testing.T) {
	dir, images := randomLayout(t, "registry.k8s.io/pause:3.10.1", "quay.io/metal3-io/ironic:v31.0.0", "docker.io/kindest/node:v1.34.4")
	cases := []struct {
		name    string
		refs    []string
		wantErr []string // the error names these; nil: no error
	}{
		{name: "one", refs: []string{"registry.k8s.io/pause:3.10.1"}},
		{name: "two", refs: []string{"registry.k8s.io/pause:3.10.1", "quay.io/metal3-io/ironic:v31.0.0"}},
		{name: "short docker name", refs: []string{"kindest/node:v1.34.4"}},
		{name: "missing", refs: []string{"registry.k8s.io/pause:3.10.1", "registry.k8s.io/etcd:3.6.5-0"},
			wantErr: []string{"registry.k8s.io/etcd:3.6.5-0", dir}},
		{name: "two missing", refs: []string{"registry.k8s.io/etcd:3.6.5-0", "registry.k8s.io/pause:9"},
			wantErr: []string{"registry.k8s.io/etcd:3.6.5-0", "registry.k8s.io/pause:9"}},
		{name: "bad ref", refs: []string{"Registry.k8s.io/UPPER:1"}, wantErr: []string{"UPPER"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			err := WriteImageArchive(dir, c.refs, &buf)
			if c.wantErr != nil {
				if err == nil {
					t.Fatal("no error")
				}
				for _, w := range c.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not name %q", err, w)
					}
				}
				if buf.Len() != 0 {
					t.Errorf("wrote %d bytes despite the error", buf.Len())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			data := buf.Bytes()
			opener := func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }
			for _, ref := range c.refs {
				tag, err := name.NewTag(ref)
				if err != nil {
					t.Fatal(err)
				}
				img, err := tarball.Image(opener, &tag)
				if err != nil {
					t.Fatalf("reading %s back: %v", ref, err)
				}
				r, _ := registry.ParseRef(ref)
				checkSame(t, ref, img, images[r.String()])
			}
		})
	}
}

// TestWriteImageArchiveToolchain exports the toolchain's pause image and
// reads it back: same config, same layers as in the layout.
func TestWriteImageArchiveToolchain(t *testing.T) {
	if testing.Short() {
		t.Skip("reads the toolchain's OCI layout (make toolchain)")
	}
	const pause = "registry.k8s.io/pause:3.10.1"
	p, err := layout.FromPath(toolchainLayout)
	if err != nil {
		t.Fatalf("no toolchain layout (make toolchain): %v", err)
	}
	idx, _ := p.ImageIndex()
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var want v1.Image
	for _, d := range im.Manifests {
		if d.Annotations[registry.AnnotationImageName] == pause {
			if want, err = idx.Image(d.Digest); err != nil {
				t.Fatal(err)
			}
		}
	}
	if want == nil {
		t.Fatalf("the toolchain layout has no %s", pause)
	}
	var buf bytes.Buffer
	if err := WriteImageArchive(toolchainLayout, []string{pause}, &buf); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	tag, err := name.NewTag(pause)
	if err != nil {
		t.Fatal(err)
	}
	got, err := tarball.Image(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }, &tag)
	if err != nil {
		t.Fatal(err)
	}
	checkSame(t, pause, got, want)
	gotCfg, _ := got.RawConfigFile()
	wantCfg, _ := want.RawConfigFile()
	if !bytes.Equal(gotCfg, wantCfg) {
		t.Errorf("config differs:\n%s\nwant\n%s", gotCfg, wantCfg)
	}
	t.Logf("%s: %d bytes of docker archive", pause, len(data))

	err = WriteImageArchive(toolchainLayout, []string{pause, "kindest/node:v0.0.0-missing"}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "kindest/node:v0.0.0-missing") {
		t.Fatalf("missing ref: error %v, want it named", err)
	}
}

// untar unpacks an archive into a folder.
func untar(t *testing.T, data []byte) string {
	t.Helper()
	dir := t.TempDir()
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return dir
		}
		if err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, h.Name)
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(out, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestWriteOCIArchive (the archive kind-images loads, written by
// ociarchive) unpacks the archive as an OCI layout and finds each
// image under its name with its digest unchanged (what a pod naming it by
// digest needs), and only the images asked for.
func TestWriteOCIArchive(t *testing.T) {
	refs := []string{"registry.k8s.io/pause:3.10.1", "registry.bootstick.dev/bpa-operator:v0.1.0", "quay.io/metal3-io/ironic:v31.0.0"}
	dir, images := randomLayout(t, refs...)
	cases := []struct {
		name    string
		refs    []string
		wantErr string
	}{
		{name: "one", refs: refs[:1]},
		{name: "all", refs: refs},
		{name: "missing", refs: []string{refs[0], "registry.k8s.io/etcd:3.6.5-0"}, wantErr: "registry.k8s.io/etcd:3.6.5-0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			err := ociarchive.Write(dir, c.refs, &buf)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error %v, want it to name %s", err, c.wantErr)
				}
				if buf.Len() != 0 {
					t.Errorf("wrote %d bytes despite the error", buf.Len())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			out := untar(t, buf.Bytes())
			p, err := layout.FromPath(out)
			if err != nil {
				t.Fatal(err)
			}
			idx, err := p.ImageIndex()
			if err != nil {
				t.Fatal(err)
			}
			im, err := idx.IndexManifest()
			if err != nil {
				t.Fatal(err)
			}
			// Each image twice: by tag, then by digest (the name a pod
			// that pins the digest is looked up by).
			if len(im.Manifests) != 2*len(c.refs) {
				t.Fatalf("%d index entries in the archive, want %d (each image by tag and by digest)", len(im.Manifests), 2*len(c.refs))
			}
			for j, d := range im.Manifests {
				i := j / 2
				want := images[c.refs[i]]
				wd, _ := want.Digest()
				name := d.Annotations[registry.AnnotationImageName]
				wantName := c.refs[i]
				if j%2 == 1 {
					wantName = c.refs[i][:strings.LastIndex(c.refs[i], ":")] + "@" + wd.String()
				}
				if name != wantName {
					t.Errorf("entry %d is named %q, want %q", j, name, wantName)
				}
				if d.Digest != wd {
					t.Errorf("%s: digest %s, want %s", name, d.Digest, wd)
				}
				got, err := idx.Image(d.Digest)
				if err != nil {
					t.Fatal(err)
				}
				checkSame(t, name, got, want)
				// every blob is there and intact
				if err := validateImage(got); err != nil {
					t.Errorf("%s: %v", name, err)
				}
			}
			var idxJSON struct{ Manifests []json.RawMessage }
			raw, _ := os.ReadFile(filepath.Join(out, "index.json"))
			if err := json.Unmarshal(raw, &idxJSON); err != nil {
				t.Fatalf("index.json: %v", err)
			}
		})
	}
}

// validateImage reads every layer, so a short or corrupt blob fails.
func validateImage(img v1.Image) error {
	ls, err := img.Layers()
	if err != nil {
		return err
	}
	for _, l := range ls {
		rc, err := l.Compressed()
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, rc)
		rc.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

func TestHasImage(t *testing.T) {
	dir, _ := randomLayout(t, "docker.io/kindest/node:v1.34.4")
	cases := []struct {
		ref  string
		want bool
	}{
		{"kindest/node:v1.34.4", true},
		{"docker.io/kindest/node:v1.34.4", true},
		{"kindest/node:v1.33.0", false},
		{"registry.k8s.io/pause:3.10.1", false},
	}
	for _, c := range cases {
		got, err := HasImage(dir, c.ref)
		if err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("HasImage(%s) = %v, want %v", c.ref, got, c.want)
		}
	}
}

// fakeEngine writes a shell script named name that answers -v with
// version and exits with infoCode for info.
func fakeEngine(t *testing.T, dir, name, version string, infoCode int) {
	t.Helper()
	script := "#!/bin/sh\ncase \"$1\" in\n-v|--version) echo '" + version + "';;\n" +
		"info) echo 'Cannot connect to the daemon. Is it running?' >&2; exit " + string(rune('0'+infoCode)) + ";;\n" +
		"*) exit 1;;\nesac\n"
	if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestDetect runs kind's detection against PATHs with no engine, an engine
// whose daemon is down, and working engines (fake programs).
func TestDetect(t *testing.T) {
	cases := []struct {
		name    string
		fakes   func(t *testing.T, dir string)
		want    string   // the engine found
		wantErr []string // the error names these
	}{
		{name: "none", fakes: func(*testing.T, string) {},
			wantErr: []string{"docker", "podman", "install docker.io or podman", "--mode host"}},
		{name: "docker without its daemon", fakes: func(t *testing.T, d string) {
			fakeEngine(t, d, "docker", "Docker version 28.2.2, build e6534b4", 1)
		}, wantErr: []string{"docker is installed but does not work", "Is it running?", "--mode host"}},
		{name: "podman", fakes: func(t *testing.T, d string) {
			fakeEngine(t, d, "podman", "podman version 4.3.1", 0)
		}, want: "podman"},
		{name: "docker before podman", fakes: func(t *testing.T, d string) {
			fakeEngine(t, d, "podman", "podman version 4.3.1", 0)
			fakeEngine(t, d, "docker", "Docker version 28.2.2, build e6534b4", 0)
		}, want: "docker"},
		{name: "not docker", fakes: func(t *testing.T, d string) {
			fakeEngine(t, d, "docker", "something else 1.0", 0)
		}, wantErr: []string{"neither docker nor podman"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			c.fakes(t, dir)
			t.Setenv("PATH", dir)
			e, err := Detect(context.Background())
			if c.wantErr != nil {
				if !errors.Is(err, ErrNoEngine) {
					t.Fatalf("error %v, want ErrNoEngine", err)
				}
				for _, w := range c.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not say %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if e.Name != c.want {
				t.Errorf("engine %s, want %s", e.Name, c.want)
			}
		})
	}
}

// TestEnsureNodeImage: the node image comes from the bundle (sent to
// `<engine> load` as a docker archive), else it must be in the engine;
// nothing is pulled. The engine is a fake docker that records what it is
// asked.
func TestEnsureNodeImage(t *testing.T) {
	const node = "kindest/node:v1.34.4"
	withNode, images := randomLayout(t, "docker.io/kindest/node:v1.34.4", "registry.k8s.io/pause:3.10.1")
	without, _ := randomLayout(t, "registry.k8s.io/pause:3.10.1")
	cases := []struct {
		name       string
		layout     string
		inEngine   bool
		wantLoaded bool
		wantErr    []string
	}{
		{name: "in the bundle", layout: withNode, wantLoaded: true},
		{name: "in the bundle and the engine", layout: withNode, inEngine: true, wantLoaded: true},
		{name: "in the engine only", layout: without, inEngine: true},
		{name: "nowhere", layout: without, wantErr: []string{node, "neither in the bundle nor in docker", "docker load", "--kind-node-image"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			inspect := "exit 1"
			if c.inEngine {
				inspect = "exit 0"
			}
			script := "#!/bin/sh\ncase \"$1\" in\n-v) echo 'Docker version 28.2.2, build e6534b4';;\ninfo) exit 0;;\n" +
				"image) " + inspect + ";;\nload) /bin/cat > " + filepath.Join(dir, "loaded.tar") + ";;\n*) exit 1;;\nesac\n"
			if err := os.WriteFile(filepath.Join(dir, "docker"), []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			t.Setenv("PATH", dir)
			e, err := Detect(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			loaded, err := EnsureNodeImage(context.Background(), e, c.layout, node)
			if c.wantErr != nil {
				if err == nil {
					t.Fatal("no error")
				}
				for _, w := range c.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not say %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if loaded != c.wantLoaded {
				t.Fatalf("loaded %v, want %v", loaded, c.wantLoaded)
			}
			data, err := os.ReadFile(filepath.Join(dir, "loaded.tar"))
			if !c.wantLoaded {
				if err == nil {
					t.Fatal("ran docker load for an image the engine has")
				}
				return
			}
			if err != nil {
				t.Fatalf("docker load got nothing: %v", err)
			}
			tag, _ := name.NewTag(node)
			img, err := tarball.Image(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }, &tag)
			if err != nil {
				t.Fatalf("docker load got no %s: %v", node, err)
			}
			checkSame(t, node, img, images["docker.io/kindest/node:v1.34.4"])
		})
	}
}
