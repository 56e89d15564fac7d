package iso

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A file only root may read (a site's credentials) stays so on the ISO:
// Rock Ridge carries the modes, and Linux mounts honour them.
func TestModesSurviveRockRidge(t *testing.T) {
	if testing.Short() {
		t.Skip("reads the ISO back with xorriso")
	}
	if _, err := exec.LookPath("xorriso"); err != nil {
		t.Fatal("xorriso is missing: make deps")
	}
	tree := t.TempDir()
	site := filepath.Join(tree, "bundle", "site")
	if err := os.MkdirAll(site, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(site, "site.yaml"), []byte("password: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tree, "public.txt"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "m.iso")
	if err := Write(context.Background(), Options{Tree: tree, Output: out, Label: "MODES"}); err != nil {
		t.Fatal(err)
	}
	rep, err := exec.Command("xorriso", "-indev", out, "-lsdl", "/bundle/site", "/bundle/site/site.yaml", "/public.txt").CombinedOutput()
	if err != nil {
		t.Fatalf("xorriso: %v\n%s", err, rep)
	}
	for _, want := range []string{"drwx------", "-rw-------", "-rw-r--r--"} {
		if !strings.Contains(string(rep), want) {
			t.Errorf("xorriso -lsdl lacks %s:\n%s", want, rep)
		}
	}
}
