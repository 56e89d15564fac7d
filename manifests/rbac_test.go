package manifests_test

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"slices"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/bootstick/bootstick/internal/bpa/controller"
	"github.com/bootstick/bootstick/internal/render"
	"github.com/bootstick/bootstick/manifests"
)

// TestBPARBACIsNamespaced: the BPA holds Roles only, in the namespace
// firstboot renders the site into (the one its --namespace flag and its
// default name) and in its own; nothing lets it list or watch Secrets, and
// it has no right to anything it does not use (Jobs, ConfigMaps but the
// install's, BareMetalHosts beyond reading and the patch that gives one
// applied with kubectl its user data). TestRunsWithItsOwnRBAC (internal/bpa/controller) runs it
// with these rules.
func TestBPARBACIsNamespaced(t *testing.T) {
	if controller.DefaultNamespace != render.Namespace {
		t.Errorf("the BPA serves %s by default; the site is rendered into %s", controller.DefaultNamespace, render.Namespace)
	}
	type rule struct {
		APIGroups     []string `yaml:"apiGroups"`
		Resources     []string `yaml:"resources"`
		ResourceNames []string `yaml:"resourceNames"`
		Verbs         []string `yaml:"verbs"`
	}
	type doc struct {
		Kind     string `yaml:"kind"`
		Metadata struct {
			Name, Namespace string
		} `yaml:"metadata"`
		Rules []rule `yaml:"rules"`
		Spec  struct {
			Template struct {
				Spec struct {
					Containers []struct {
						Args []string `yaml:"args"`
					} `yaml:"containers"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	read := func(name string) []doc {
		data, err := fs.ReadFile(manifests.FS, name)
		if err != nil {
			t.Fatal(err)
		}
		var out []doc
		dec := yaml.NewDecoder(bytes.NewReader(data))
		for {
			var d doc
			if err := dec.Decode(&d); errors.Is(err, io.EOF) {
				return out
			} else if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			out = append(out, d)
		}
	}
	roles := map[string]bool{}
	for _, d := range read("22-rbac-bpa.yaml") {
		switch d.Kind {
		case "ClusterRole", "ClusterRoleBinding":
			t.Errorf("%s %s: the BPA needs no cluster-wide rights", d.Kind, d.Metadata.Name)
		case "Role":
			roles[d.Metadata.Namespace] = true
		}
		for _, r := range d.Rules {
			for _, res := range r.Resources {
				if res == "secrets" && (slices.Contains(r.Verbs, "list") || slices.Contains(r.Verbs, "watch") || slices.Contains(r.Verbs, "*")) {
					t.Errorf("Role %s/%s lets the BPA %v Secrets: it reads two by name", d.Metadata.Namespace, d.Metadata.Name, r.Verbs)
				}
				if res == "configmaps" && !slices.Equal(r.ResourceNames, []string{"bootstick-install"}) {
					t.Errorf("Role %s/%s: ConfigMaps %v, want only bootstick-install", d.Metadata.Namespace, d.Metadata.Name, r.ResourceNames)
				}
				if res == "baremetalhosts" {
					for _, v := range r.Verbs {
						if !slices.Contains([]string{"get", "list", "watch", "patch"}, v) {
							t.Errorf("Role %s/%s lets the BPA %s BareMetalHosts: it reads them and patches one applied with kubectl (its user data), nothing else", d.Metadata.Namespace, d.Metadata.Name, v)
						}
					}
				}
				if res == "jobs" {
					t.Errorf("Role %s/%s: the BPA makes no Job", d.Metadata.Namespace, d.Metadata.Name)
				}
			}
		}
	}
	if len(roles) != 2 || !roles[render.Namespace] || !roles["bpa-system"] {
		t.Errorf("the BPA's Roles are in %v, want %s and bpa-system", roles, render.Namespace)
	}
	for _, d := range read("30-bpa.yaml") {
		if d.Kind == "Deployment" && !slices.Contains(d.Spec.Template.Spec.Containers[0].Args, "--namespace="+render.Namespace) {
			t.Errorf("the BPA's args %v do not name %s", d.Spec.Template.Spec.Containers[0].Args, render.Namespace)
		}
	}
}
