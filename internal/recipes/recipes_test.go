package recipes

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"
)

func TestDefaultRecipesLoad(t *testing.T) {
	spec, err := Load(filepath.Join("..", "..", "images", "recipes.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	bins := map[string]bool{}
	for _, r := range spec.Binaries {
		for _, b := range r.BinaryNames() {
			bins[b] = true
		}
	}
	for _, want := range []string{"kubeadm", "kubelet", "kubectl", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy", "etcd", "etcdctl", "coredns", "pause"} {
		if !bins[want] {
			t.Errorf("images/recipes.yaml builds no %s", want)
		}
	}
	// A kind node image takes its files from the kind module firstboot
	// creates clusters with.
	gomod, err := os.ReadFile(filepath.Join("..", "..", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	mf, err := modfile.Parse("go.mod", gomod, nil)
	if err != nil {
		t.Fatal(err)
	}
	kind := ""
	for _, r := range mf.Require {
		if r.Mod.Path == "sigs.k8s.io/kind" {
			kind = r.Mod.String()
		}
	}
	nodes := 0
	for _, im := range spec.Images {
		if len(im.Entrypoint) == 0 || im.Dir == "" {
			t.Errorf("image %s: defaults not applied: %+v", im.Ref, im)
		}
		if im.KindNode != nil {
			nodes++
			if im.KindNode.Base != kind {
				t.Errorf("image %s: kindNode.base is %s, but go.mod requires %s: make them agree", im.Ref, im.KindNode.Base, kind)
			}
		}
	}
	if nodes != 1 {
		t.Errorf("images/recipes.yaml has %d kind node images, want 1", nodes)
	}
}

func TestBinaryNames(t *testing.T) {
	r := GoRecipe{Packages: []Package{{Path: "go.etcd.io/etcd/v3"}, {Path: "go.etcd.io/etcd/server/v3", Name: "etcd-server"}, {Path: "go.etcd.io/etcd/etcdctl/v3"}, {Path: "k8s.io/kubernetes/cmd/kubeadm"}, {Path: "github.com/coredns/coredns"}}}
	got := strings.Join(r.BinaryNames(), " ")
	if want := "etcd etcd-server etcdctl kubeadm coredns"; got != want {
		t.Fatalf("BinaryNames = %q, want %q", got, want)
	}
	local := GoRecipe{Local: "./pause", Packages: []Package{{Path: "."}}}
	if got := local.BinaryNames()[0]; got != "pause" {
		t.Fatalf("local binary name = %q, want pause", got)
	}
}

const base = `apiVersion: bootstick.dev/v1alpha1
kind: Recipes
binaries:
- name: kubernetes
  module: k8s.io/kubernetes
  version: v1.34.4
  replaceStaging: true
  packages: [k8s.io/kubernetes/cmd/kubeadm]
- name: pause
  local: ./pause
  version: "3.10.1"
  packages: [.]
images:
- ref: registry.k8s.io/pause:3.10.1
  binaries: [pause]
`

func TestBadRecipes(t *testing.T) {
	for _, tc := range []struct {
		name, from, to, want string
	}{
		{"unknown field", "kind: Recipes\n", "kind: Recipes\nextra: 1\n", `line 3: extra: unknown field "extra"`},
		{"bad version", "version: v1.34.4", "version: 1.34.4", `line 6: binaries[0].version: Invalid value: "1.34.4": want a module version such as v1.2.3`},
		{"bad module", "module: k8s.io/kubernetes", "module: not a module", `binaries[0].module: Invalid value: "not a module"`},
		{"module and local", "  module: k8s.io/kubernetes\n", "  module: k8s.io/kubernetes\n  local: ./pause\n", "binaries[0].local: Forbidden: give module or local, not both"},
		{"no source", "  module: k8s.io/kubernetes\n", "", "binaries[0].module: Required value"},
		{"missing local", "local: ./pause", "local: ./nowhere", `binaries[1].local: Not found: "./nowhere"`},
		{"duplicate name", "- name: pause", "- name: kubernetes", `binaries[1].name: Duplicate value: "kubernetes"`},
		{"duplicate binary", "packages: [.]", "packages: [.]\n- name: other\n  local: ./pause\n  version: \"1\"\n  packages: [.]", `binaries[2].packages[0]: Duplicate value: ". (binary \"pause\", also built by recipe pause)"`},
		{"same go build name", "packages: [k8s.io/kubernetes/cmd/kubeadm]", "packages: [k8s.io/kubernetes/cmd/kubeadm, {package: example.test/kubeadm, name: other}]", `binaries[0].packages[1]: Duplicate value: "example.test/kubeadm (go build names it \"kubeadm\", as another package of this recipe)"`},
		{"package without path", "packages: [k8s.io/kubernetes/cmd/kubeadm]", "packages: [{name: x}]", "binaries[0].packages[0].package: Required value"},
		{"no packages", "  packages: [k8s.io/kubernetes/cmd/kubeadm]\n", "", "binaries[0].packages: Required value"},
		{"bad ldflags", "  replaceStaging: true\n", "  replaceStaging: true\n  ldflags: [\"-X a={{.Version\"]\n", "binaries[0].ldflags[0]: Invalid value"},
		{"ref without tag", "ref: registry.k8s.io/pause:3.10.1", "ref: registry.k8s.io/pause", "images[0].ref: Invalid value"},
		{"no binary and no debs", "  binaries: [pause]\n", "", "images[0].binaries: Required value: name at least one binary, or Debian packages under debs"},
		{"debs without entrypoint", "  binaries: [pause]\n", "  debs: [busybox-static]\n", "images[0].entrypoint: Required value: the command an image of Debian packages alone runs"},
		{"unknown binary", "binaries: [pause]", "binaries: [paws]", `images[0].binaries[0]: Not found: "paws"`},
		{"relative dir", "binaries: [pause]", "binaries: [pause]\n  dir: usr/bin", `images[0].dir: Invalid value: "usr/bin": must be an absolute path`},
		{"symlinks without debs", "binaries: [pause]", "binaries: [pause]\n  symlinks: {/usr/sbin/x: y}", "images[0].symlinks: Forbidden"},
		{"wrong kind", "kind: Recipes", "kind: Bundle", `kind: Invalid value: "Bundle": must be Recipes`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			os.Mkdir(filepath.Join(dir, "pause"), 0o755)
			data := strings.Replace(base, tc.from, tc.to, 1)
			if data == base {
				t.Fatalf("test case did not change the file: %q not found", tc.from)
			}
			f := filepath.Join(dir, "recipes.yaml")
			os.WriteFile(f, []byte(data), 0o644)
			_, err := Load(f)
			if err == nil {
				t.Fatalf("Load succeeded, want an error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), f) {
				t.Fatalf("error:\n%v\nwant the file name and %q", err, tc.want)
			}
		})
	}
}

const withKindNode = base + `- ref: registry.bootstick.dev/kind-node:v1.34.4
  debian: {suite: trixie, packages: [systemd]}
  entrypoint: [/sbin/init]
  kindNode:
    base: sigs.k8s.io/kind@v0.30.0
    files: [usr/local/bin/entrypoint]
    binaries: [kubeadm]
    preload: [registry.k8s.io/pause:3.10.1]
`

// TestBadKindNode: each mistake in a kind node image is named by its field
// path.
func TestBadKindNode(t *testing.T) {
	for _, tc := range []struct {
		name, from, to, want string
	}{
		{"no debian", "  debian: {suite: trixie, packages: [systemd]}\n", "", "images[1].debian: Required value: a kind node image is a Debian root"},
		{"bad base", "base: sigs.k8s.io/kind@v0.30.0", "base: sigs.k8s.io/kind", `images[1].kindNode.base: Invalid value: "sigs.k8s.io/kind": want kind's module as module@version`},
		{"unknown binary", "binaries: [kubeadm]", "binaries: [kubeadmin]", `images[1].kindNode.binaries[0]: Not found: "kubeadmin"`},
		{"unknown preload", "preload: [registry.k8s.io/pause:3.10.1]", "preload: [registry.k8s.io/etcd:3.6.5-0]", `images[1].kindNode.preload[0]: Not found: "registry.k8s.io/etcd:3.6.5-0"`},
		{"preload itself", "preload: [registry.k8s.io/pause:3.10.1]", "preload: [registry.bootstick.dev/kind-node:v1.34.4]", "images[1].kindNode.preload[0]: Invalid value: \"registry.bootstick.dev/kind-node:v1.34.4\": a node image cannot preload a node image"},
		{"file outside", "files: [usr/local/bin/entrypoint]", "files: [../../go.mod]", `images[1].kindNode.files[0]: Invalid value: "../../go.mod": a clean path below images/base/files`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			os.Mkdir(filepath.Join(dir, "pause"), 0o755)
			f := filepath.Join(dir, "recipes.yaml")
			os.WriteFile(f, []byte(withKindNode), 0o644)
			if _, err := Load(f); err != nil {
				t.Fatalf("the good file does not load: %v", err)
			}
			data := strings.Replace(withKindNode, tc.from, tc.to, 1)
			if data == withKindNode {
				t.Fatalf("test case did not change the file: %q not found", tc.from)
			}
			os.WriteFile(f, []byte(data), 0o644)
			_, err := Load(f)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), f) {
				t.Fatalf("error:\n%v\nwant the file name and %q", err, tc.want)
			}
		})
	}
}
