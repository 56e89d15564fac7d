package gobuild

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bootstick/bootstick/internal/recipes"
)

// TestWrapperReplacesStaging checks the generated go.mod of a module laid
// out like k8s.io/kubernetes: each ./staging replacement becomes the
// published v0.<minor>.<patch> of that module.
func TestWrapperReplacesStaging(t *testing.T) {
	src := t.TempDir()
	upstream := `module example.test/kube

go 1.24.0

require (
	example.test/api v0.0.0
	example.test/client v0.0.0
)

replace (
	example.test/api => ./staging/src/example.test/api
	example.test/client => ./staging/src/example.test/client
	example.test/other => example.test/other v1.2.3
)
`
	os.WriteFile(filepath.Join(src, "go.mod"), []byte(upstream), 0o644)
	r := &recipes.GoRecipe{
		Name: "kube", Module: "example.test/kube", Version: "v1.34.4", ReplaceStaging: true,
		Replace: map[string]string{"example.test/kube": src},
	}
	gomod, gosum, err := wrapperGoMod(context.Background(), "go", r, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if gosum != nil {
		t.Errorf("a go.sum without upstreamSum: %q", gosum)
	}
	got := string(gomod)
	for _, want := range []string{
		"module bootstick.local/recipe/kube",
		"go 1.24.0",
		"require example.test/kube v1.34.4",
		"example.test/api => example.test/api v0.34.4",
		"example.test/client => example.test/client v0.34.4",
		"example.test/kube => " + src,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("go.mod lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "example.test/other") {
		t.Errorf("go.mod copies a replacement that is not ./staging:\n%s", got)
	}

	r.ReplaceStaging = true
	os.WriteFile(filepath.Join(src, "go.mod"), []byte("module example.test/kube\n\ngo 1.24.0\n"), 0o644)
	if _, _, err := wrapperGoMod(context.Background(), "go", r, t.TempDir()); err == nil || !strings.Contains(err.Error(), "replaces no module with ./staging") {
		t.Fatalf("replaceStaging on a module without staging: %v", err)
	}
}

// TestWrapperReplaceLocal is baremetal-operator's shape: sub-modules in
// ./folders, published at the main module's version, and a go.sum the
// wrapper must start from.
func TestWrapperReplaceLocal(t *testing.T) {
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "go.mod"), []byte(`module example.test/bmo

go 1.21

require example.test/bmo/apis v0.5.1

replace example.test/bmo/apis => ./apis

replace example.test/pinned => example.test/pinned v1.0.0
`), 0o644)
	sum := "example.test/pinned v1.0.0 h1:AAAA=\n"
	os.WriteFile(filepath.Join(src, "go.sum"), []byte(sum), 0o644)
	r := &recipes.GoRecipe{
		Name: "bmo", Module: "example.test/bmo", Version: "v0.6.0", ReplaceLocal: true, UpstreamSum: true,
		Replace: map[string]string{"example.test/bmo": src},
	}
	gomod, gosum, err := wrapperGoMod(context.Background(), "go", r, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(gomod), "example.test/bmo/apis => example.test/bmo/apis v0.6.0") {
		t.Errorf("go.mod does not pin the ./apis sub-module at the recipe's version:\n%s", gomod)
	}
	if strings.Contains(string(gomod), "example.test/pinned") {
		t.Errorf("go.mod copies a replacement that is not a ./folder:\n%s", gomod)
	}
	if string(gosum) != sum {
		t.Errorf("go.sum = %q, want the module's own %q", gosum, sum)
	}
	os.Remove(filepath.Join(src, "go.sum"))
	if _, _, err := wrapperGoMod(context.Background(), "go", r, t.TempDir()); err == nil || !strings.Contains(err.Error(), "upstreamSum is set") {
		t.Fatalf("upstreamSum on a module without go.sum: %v", err)
	}
}

func TestLdflags(t *testing.T) {
	r := &recipes.GoRecipe{Version: "v1.34.4", Ldflags: []string{"-X a.v={{.Version}}", "-X a.m={{.Major}}.{{.Minor}}", "-X a.d={{.BuildDate}}"}}
	got, err := Ldflags(r, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	want := "-X a.v=v1.34.4 -X a.m=1.34 -X a.d=1970-01-01T00:00:00Z"
	if strings.Join(got, " ") != want {
		t.Fatalf("Ldflags = %q, want %q", strings.Join(got, " "), want)
	}
	r.Ldflags = []string{"{{.Nope}}"}
	if _, err := Ldflags(r, time.Unix(0, 0)); err == nil {
		t.Fatal("an unknown template field expanded without error")
	}
}

// TestRecipeEnvUnchecked: an unchecked recipe keeps its module and the
// modules its replace directives take from the proxy out of the checksum
// database's lookups; a local folder is no module to look up.
func TestRecipeEnvUnchecked(t *testing.T) {
	r := &recipes.GoRecipe{Name: "bmo", Module: "example.test/bmo", Version: "v0.13.2", UncheckedSum: true,
		Replace: map[string]string{
			"example.test/bmo/pkg/hw": "example.test/bmo/pkg/hw@v0.13.1",
			"example.test/other/api":  "example.test/other/api@v0.8.0",
			"example.test/bmo2/api":   "example.test/bmo2/api@v1.0.0", // not below example.test/bmo
			"example.test/local":      "../local",
		}}
	var got string
	for _, e := range RecipeEnv(r) {
		if v, ok := strings.CutPrefix(e, "GONOSUMDB="); ok {
			got = v
		}
	}
	if want := "example.test/bmo,example.test/bmo2/api,example.test/other/api"; got != want {
		t.Errorf("GONOSUMDB=%q, want %q", got, want)
	}
	r.UncheckedSum = false
	for _, e := range RecipeEnv(r) {
		if strings.HasPrefix(e, "GONOSUMDB=") {
			t.Errorf("a checked recipe has %s", e)
		}
	}
}
