package manifests_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"io/fs"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bootstick/bootstick/internal/kube"

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

var update = flag.Bool("update", false, "rewrite 30-bpa.yaml's image digest with the toolchain's")

// deployFiles are the workloads: every image they name is pinned by digest.
var deployFiles = []string{"30-bpa.yaml", "31-baremetal-operator.yaml", "32-ironic.yaml"}

var pinned = regexp.MustCompile(`^[a-z0-9.-]+(:[0-9]+)?/[a-z0-9._/-]+(:[A-Za-z0-9._-]+)?@sha256:[0-9a-f]{64}$`)

func TestWorkloadImagesByDigest(t *testing.T) {
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
		for _, u := range uses {
			if !pinned.MatchString(u.Image) {
				t.Errorf("%s: image %q is not pinned by digest (want REGISTRY/NAME[:TAG]@sha256:<64 hex>)", u.By, u.Image)
			}
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
		}
	}
}

// TestBPAImageDigest: 30-bpa.yaml pins the image the toolchain builds from
// images/recipes.yaml. After a change to internal/bpa, go.mod or Go, run
// `make toolchain`, then this test with -update to pin the new digest.
func TestBPAImageDigest(t *testing.T) {
	if testing.Short() {
		t.Skip("integration: reads the toolchain `make toolchain` built")
	}
	spec, err := recipes.Load("../images/recipes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var ref string
	for _, im := range spec.Images {
		if strings.Contains(im.Ref, "/bpa-operator:") {
			ref = im.Ref
		}
	}
	if ref == "" {
		t.Fatal("images/recipes.yaml builds no bpa-operator image")
	}
	tc, err := toolchain.Open(cas.DefaultRoot())
	if err != nil {
		t.Fatal(err)
	}
	var built cas.Digest
	for _, im := range tc.Manifest.Images {
		if im.Ref == ref {
			built = im.Digest
		}
	}
	if built == "" {
		t.Fatalf("the toolchain in %s has no %s: run `make toolchain`", tc.Dir, ref)
	}
	r, err := registry.ParseRef(ref)
	if err != nil {
		t.Fatal(err)
	}
	want := r.Registry + "/" + r.Repository + "@" + string(built)

	data, err := os.ReadFile("30-bpa.yaml")
	if err != nil {
		t.Fatal(err)
	}
	uses, err := completeness.ManifestImages("30-bpa.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	if len(uses) != 1 {
		t.Fatalf("30-bpa.yaml names %d images, want 1", len(uses))
	}
	if got := uses[0].Image; got != want {
		if *update {
			out := bytes.Replace(data, []byte("image: "+got+"\n"), []byte("image: "+want+"\n"), 1)
			if err := os.WriteFile("30-bpa.yaml", out, 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("30-bpa.yaml now pins %s", want)
			return
		}
		t.Errorf("30-bpa.yaml pins %s, but the toolchain built %s\nrun: go test ./manifests -run TestBPAImageDigest -update", got, want)
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
		if len(dep.Spec.Template.Spec.Containers) == 0 || !strings.Contains(dep.Spec.Template.Spec.Containers[0].Image, "@sha256:") {
			t.Errorf("%s/%s: %+v", d.ns, d.name, dep.Spec.Template.Spec.Containers)
		}
	}
}
