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
	gomod, err := wrapperGoMod(context.Background(), "go", r, t.TempDir())
	if err != nil {
		t.Fatal(err)
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
	if _, err := wrapperGoMod(context.Background(), "go", r, t.TempDir()); err == nil || !strings.Contains(err.Error(), "replaces no module with ./staging") {
		t.Fatalf("replaceStaging on a module without staging: %v", err)
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
