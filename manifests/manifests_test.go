package manifests

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

func TestFilesParseInOrder(t *testing.T) {
	names := Files()
	want := []string{"00-namespaces.yaml", "10-crds-metal3.yaml", "11-crd-bpa.yaml", "20-rbac-baremetal-operator.yaml", "21-rbac-ironic.yaml", "22-rbac-bpa.yaml", "30-bpa.yaml", "31-baremetal-operator.yaml", "32-ironic.yaml"}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Fatalf("Files() = %v, want %v", names, want)
	}
	kinds := map[string]int{}
	for _, n := range names {
		data, err := fs.ReadFile(FS, n)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		for {
			var obj struct {
				APIVersion string `yaml:"apiVersion"`
				Kind       string `yaml:"kind"`
				Metadata   struct {
					Name string `yaml:"name"`
				} `yaml:"metadata"`
			}
			err := dec.Decode(&obj)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", n, err)
			}
			if obj.APIVersion == "" || obj.Kind == "" || obj.Metadata.Name == "" {
				t.Fatalf("%s: a document without apiVersion, kind or name: %+v", n, obj)
			}
			kinds[obj.Kind]++
		}
	}
	if kinds["CustomResourceDefinition"] != 12 || kinds["Namespace"] != 4 { // metal3 apis v0.13.2: 11 CRDs, and the BPA's
		t.Fatalf("kinds = %v", kinds)
	}
}

// TestGeneratedUpToDate regenerates the CRDs with the pinned controller-gen
// and fails when the committed ones differ: run `make manifests`.
func TestGeneratedUpToDate(t *testing.T) {
	if testing.Short() {
		t.Skip("builds controller-gen (about a minute cold); run without -short")
	}
	out := t.TempDir()
	cmd := exec.Command("bash", "generate.sh")
	cmd.Env = append(os.Environ(), "OUT="+out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("generate.sh: %v\n%s", err, b)
	}
	for _, n := range []string{"10-crds-metal3.yaml", "11-crd-bpa.yaml"} {
		fresh, err := os.ReadFile(filepath.Join(out, n))
		if err != nil {
			t.Fatal(err)
		}
		committed, err := fs.ReadFile(FS, n)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(fresh, committed) {
			t.Errorf("manifests/%s is stale: run `make manifests` (bash manifests/generate.sh) and commit it", n)
		}
	}
}
