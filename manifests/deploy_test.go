package manifests_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bootstick/bootstick/internal/bundle"
	"github.com/bootstick/bootstick/internal/kube"
	"github.com/bootstick/bootstick/internal/render"
	"github.com/bootstick/bootstick/internal/site"

	"go.yaml.in/yaml/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/completeness"
	"github.com/bootstick/bootstick/internal/kubetest"
	"github.com/bootstick/bootstick/internal/recipes"
	"github.com/bootstick/bootstick/internal/registry"
	"github.com/bootstick/bootstick/internal/toolchain"
	"github.com/bootstick/bootstick/manifests"
)

// deployFiles are the workloads. They name their images by tag; mkusb
// pins each to the digest in bundle.lock when it builds a stick.
var deployFiles = []string{"30-bpa.yaml", "31-baremetal-operator.yaml", "32-ironic.yaml"}

var pinned = regexp.MustCompile(`^[a-z0-9.-]+(:[0-9]+)?/[a-z0-9._/-]+:[A-Za-z0-9._-]+@sha256:[0-9a-f]{64}$`)

// workloadImages lists the images each workload file names.
func workloadImages(t *testing.T) map[string][]completeness.Use {
	out := map[string][]completeness.Use{}
	for _, n := range deployFiles {
		data, err := fs.ReadFile(manifests.FS, n)
		if err != nil {
			t.Fatal(err)
		}
		uses, err := completeness.ManifestImages(n, data)
		if err != nil {
			t.Fatal(err)
		}
		if len(uses) == 0 {
			t.Errorf("%s references no image", n)
		}
		out[n] = uses
	}
	return out
}

// TestWorkloadImagesAreBuilt: every image a workload names is one the
// toolchain builds (images/recipes.yaml), by tag and without a digest, so
// the stick's build pins it and nobody edits a digest by hand.
func TestWorkloadImagesAreBuilt(t *testing.T) {
	spec, err := recipes.Load("../images/recipes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	built := map[string]bool{}
	for _, im := range spec.Images {
		built[im.Ref] = true
	}
	for _, uses := range workloadImages(t) {
		for _, u := range uses {
			if strings.Contains(u.Image, "@") {
				t.Errorf("%s: image %q carries a digest; name it by tag (mkusb pins it from the lock)", u.By, u.Image)
			}
			if !built[u.Image] {
				t.Errorf("%s: image %q is not built by images/recipes.yaml", u.By, u.Image)
			}
		}
	}
}

// TestImagesPinnedFromLock: with the images the toolchain built (`make
// toolchain`), each workload ships naming them by digest.
func TestImagesPinnedFromLock(t *testing.T) {
	if testing.Short() {
		t.Skip("integration: reads the toolchain `make toolchain` built")
	}
	tc, err := toolchain.Open(cas.DefaultRoot())
	if err != nil {
		t.Fatal(err)
	}
	refs := map[string]bundle.LockedImage{}
	digests := map[string]cas.Digest{}
	for _, im := range tc.Manifest.Images {
		r, err := registry.ParseRef(im.Ref)
		if err != nil {
			t.Fatal(err)
		}
		refs[r.String()] = bundle.LockedImage{Ref: im.Ref, Digest: im.Digest, Source: bundle.SourceToolchain}
		digests[im.Ref] = im.Digest
	}
	for n, uses := range workloadImages(t) {
		data, _ := fs.ReadFile(manifests.FS, n)
		out := bundle.PinImages(data, refs)
		after, err := completeness.ManifestImages(n, out)
		if err != nil {
			t.Fatalf("%s after pinning: %v", n, err)
		}
		if len(after) != len(uses) {
			t.Fatalf("%s names %d images after pinning, %d before", n, len(after), len(uses))
		}
		for i, u := range after {
			want := uses[i].Image + "@" + string(digests[uses[i].Image])
			if !pinned.MatchString(u.Image) || u.Image != want {
				t.Errorf("%s: pinned %q, want %q", u.By, u.Image, want)
			}
		}
		// Only the image lines change.
		if strings.Count(string(out), "\n") != strings.Count(string(data), "\n") {
			t.Errorf("%s: pinning changed the number of lines", n)
		}
	}
}

// TestWorkloadsUseTheirNamespacesAndAccounts: each workload runs in a
// namespace 00-namespaces.yaml makes, as a service account the RBAC files
// make, with the ConfigMaps it reads in its own namespace.
func TestWorkloadsUseTheirNamespacesAndAccounts(t *testing.T) {
	have := map[string]bool{} // kind/namespace/name
	type podSpec struct {
		ServiceAccountName string `yaml:"serviceAccountName"`
		Containers         []struct {
			EnvFrom []struct {
				ConfigMapRef *struct {
					Name string `yaml:"name"`
				} `yaml:"configMapRef"`
			} `yaml:"envFrom"`
			Env []struct {
				Name      string `yaml:"name"`
				ValueFrom *struct {
					SecretKeyRef *struct {
						Name string `yaml:"name"`
						Key  string `yaml:"key"`
					} `yaml:"secretKeyRef"`
				} `yaml:"valueFrom"`
			} `yaml:"env"`
		} `yaml:"containers"`
	}
	type doc struct {
		Kind     string `yaml:"kind"`
		Metadata struct {
			Name, Namespace string
		} `yaml:"metadata"`
		Spec struct {
			Template struct {
				Spec podSpec `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	var deployments []doc
	// firstboot's metal3 step writes Ironic's and BMO's ConfigMaps.
	objs, err := render.Metal3(render.Metal3Inputs{Provisioning: site.ProvisioningNetwork{Interface: "eth1", Address: "172.22.0.1/24",
		DHCPRange: site.DHCPRange{Start: "172.22.0.10", End: "172.22.0.100"}}, Auth: render.IronicAuth{Username: "u", Password: "p"},
		TLS:        render.IronicTLSFiles{CA: []byte("CA"), CAKey: []byte("CA key"), Cert: []byte("cert"), Key: []byte("key")},
		VMediaPath: "Zm9yIHRoZSB0ZXN0cyBvbmx5LCBub3QgYSBzZWNyZXQ"})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		have[o.GetObjectKind().GroupVersionKind().Kind+"/"+o.GetNamespace()+"/"+o.GetName()] = true
	}
	for _, n := range manifests.Files() {
		data, err := fs.ReadFile(manifests.FS, n)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		for {
			var d doc
			err := dec.Decode(&d)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", n, err)
			}
			have[d.Kind+"/"+d.Metadata.Namespace+"/"+d.Metadata.Name] = true
			if d.Kind == "Deployment" {
				deployments = append(deployments, d)
			}
		}
	}
	if len(deployments) != 3 {
		t.Fatalf("%d Deployments, want 3 (bpa, baremetal-operator, ironic)", len(deployments))
	}
	for _, d := range deployments {
		ns, ps := d.Metadata.Namespace, d.Spec.Template.Spec
		if !have["Namespace//"+ns] {
			t.Errorf("Deployment %s: no Namespace %s", d.Metadata.Name, ns)
		}
		if !have["ServiceAccount/"+ns+"/"+ps.ServiceAccountName] {
			t.Errorf("Deployment %s/%s: no ServiceAccount %q", ns, d.Metadata.Name, ps.ServiceAccountName)
		}
		for _, c := range ps.Containers {
			for _, e := range c.EnvFrom {
				if e.ConfigMapRef != nil && !have["ConfigMap/"+ns+"/"+e.ConfigMapRef.Name] {
					t.Errorf("Deployment %s/%s: no ConfigMap %s", ns, d.Metadata.Name, e.ConfigMapRef.Name)
				}
			}
			for _, e := range c.Env {
				if r := e.ValueFrom; r != nil && r.SecretKeyRef != nil && !have["Secret/"+ns+"/"+r.SecretKeyRef.Name] {
					t.Errorf("Deployment %s/%s: %s comes from Secret %s, which firstboot does not make", ns, d.Metadata.Name, e.Name, r.SecretKeyRef.Name)
				}
			}
		}
	}
}

// TestManifestsApply applies every manifest to a real kube-apiserver: the
// Deployments, Services and ConfigMaps pass its validation.
func TestManifestsApply(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver from the toolchain")
	}
	env := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kc, err := kube.New(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	if err := kc.ApplyFS(ctx, manifests.FS, manifests.Files()); err != nil {
		t.Fatal(err)
	}
	for _, d := range []struct{ ns, name string }{{"bpa-system", "bpa-operator"}, {"baremetal-operator-system", "baremetal-operator"}, {"ironic", "ironic"}} {
		dep, err := env.Client.AppsV1().Deployments(d.ns).Get(ctx, d.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// The sources name images by tag; mkusb pins the digests from the
		// lock (TestImagesPinnedFromLock).
		cs := dep.Spec.Template.Spec.Containers
		if len(cs) == 0 {
			t.Errorf("%s/%s has no containers", d.ns, d.name)
		}
		for _, c := range cs {
			if !strings.HasPrefix(c.Image, "registry.bootstick.dev/") {
				t.Errorf("%s/%s container %s: image %q is not one the stick builds", d.ns, d.name, c.Name, c.Image)
			}
		}
	}
}
