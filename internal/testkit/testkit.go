// Package testkit makes small stand-ins for the slow parts of a build, for
// tests and benchmarks: a toolchain view (a few tiny binaries and images
// that share a base layer, in the cache like the real one) and a bundle
// folder with manifests.
package testkit

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/ocibuild"
	"github.com/bootstick/bootstick/internal/toolchain"
)

// Registry is the registry name of the fake images (a reserved test name).
const Registry = "registry.test"

// Version is the fake release.
const Version = "v1.34.4"

// Images are the fake release's images (what kubeadm would pull).
var Images = []string{
	Registry + "/kube-apiserver:" + Version,
	Registry + "/kube-controller-manager:" + Version,
	Registry + "/kube-scheduler:" + Version,
	Registry + "/kube-proxy:" + Version,
	Registry + "/etcd:3.6.5-0",
	Registry + "/coredns/coredns:v1.12.1",
	Registry + "/pause:3.10.1",
}

// Toolchain writes a toolchain view into store, as toolchain.Build
// would, with binaries of binSize bytes and one image per ref of Images
// plus extra. Every image shares one base layer of baseSize bytes.
func Toolchain(store *cas.Store, binSize, baseSize int, extra ...string) (*toolchain.Result, error) {
	epoch := time.Unix(0, 0)
	m := toolchain.Manifest{Go: "go-test", KubernetesVersion: Version,
		Recipes: []toolchain.RecipeRecord{{Name: "kubernetes", Source: "k8s.io/kubernetes@" + Version}}}
	for _, name := range []string{"kubeadm", "kubelet", "kubectl"} {
		data := make([]byte, binSize)
		copy(data, "#!/bin/sh\necho "+name+"\n")
		for i := 32; i < len(data); i++ {
			data[i] = byte(i*7 + len(name))
		}
		w, err := store.Create()
		if err != nil {
			return nil, err
		}
		w.Write(data)
		d, err := w.Commit("")
		if err != nil {
			return nil, err
		}
		m.Binaries = append(m.Binaries, toolchain.Binary{Name: name, Recipe: "kubernetes", Digest: d, Size: int64(len(data))})
	}
	baseData := make([]byte, baseSize)
	for i := range baseData {
		baseData[i] = byte(i * 31)
	}
	base, err := ocibuild.WriteLayer(store, []ocibuild.Entry{ocibuild.File("/base.bin", 0o644, baseData)}, epoch)
	if err != nil {
		return nil, err
	}
	var images []ocibuild.Image
	for _, ref := range append(append([]string{}, Images...), extra...) {
		l, err := ocibuild.WriteLayer(store, []ocibuild.Entry{ocibuild.File("/usr/local/bin/"+strings.ReplaceAll(ref, "/", "_"), 0o755, []byte(ref))}, epoch)
		if err != nil {
			return nil, err
		}
		im, err := ocibuild.WriteImage(store, ref, []ocibuild.Layer{base, l}, ocibuild.Config{Entrypoint: []string{"/x"}}, epoch)
		if err != nil {
			return nil, err
		}
		images = append(images, im)
		m.Images = append(m.Images, toolchain.ImageRecord{Ref: ref, Digest: im.Manifest})
	}
	dir := filepath.Join(store.Root, "toolchain", "views", "test")
	os.RemoveAll(dir)
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		return nil, err
	}
	for _, b := range m.Binaries {
		if err := store.Link(b.Digest, filepath.Join(dir, "bin", b.Name)); err != nil {
			return nil, err
		}
	}
	if err := ocibuild.WriteLayout(store, filepath.Join(dir, "oci"), images); err != nil {
		return nil, err
	}
	mj, _ := json.MarshalIndent(m, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "toolchain.json"), mj, 0o644); err != nil {
		return nil, err
	}
	return &toolchain.Result{Dir: dir, Manifest: m}, nil
}

// Bundle writes a bundle folder at dir: bundle.yaml (a Bundle built from
// the toolchain, with the given extra YAML appended), recipes.yaml (only
// its presence matters) and manifests/ with the given files.
func Bundle(dir string, manifests map[string]string, extra string) (string, error) {
	if err := os.MkdirAll(filepath.Join(dir, "manifests"), 0o755); err != nil {
		return "", err
	}
	for name, body := range manifests {
		if err := os.WriteFile(filepath.Join(dir, "manifests", name), []byte(body), 0o644); err != nil {
			return "", err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "recipes.yaml"), []byte("# stand-in\n"), 0o644); err != nil {
		return "", err
	}
	body := fmt.Sprintf(`apiVersion: bootstick.dev/v1alpha1
kind: Bundle
name: test
os: {suite: bookworm, mirror: "http://deb.test/debian"}
kubernetes: {version: %s, recipes: recipes.yaml}
manifests: {dir: manifests}
packages: {binaries: [kubeadm, kubelet, kubectl]}
%s`, Version, extra)
	p := filepath.Join(dir, "bundle.yaml")
	return p, os.WriteFile(p, []byte(body), 0o644)
}

// Manifests are small manifests that reference images of the fake
// registry.
var Manifests = map[string]string{
	"00-namespace.yaml": "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: demo\n",
	"10-app.yaml": `apiVersion: apps/v1
kind: Deployment
metadata: {name: app, namespace: demo}
spec:
  selector: {matchLabels: {app: app}}
  template:
    metadata: {labels: {app: app}}
    spec:
      initContainers:
      - {name: init, image: ` + Registry + `/pause:3.10.1}
      containers:
      - {name: app, image: ` + Registry + `/coredns/coredns:v1.12.1}
`,
}

// TreeSize sums the sizes of the regular files under dir.
func TreeSize(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		fi, err := d.Info()
		if err == nil {
			n += fi.Size()
		}
		return err
	})
	return n, err
}
