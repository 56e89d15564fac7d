package toolchain

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// A local recipe's cache key covers every package of the repository its
// binaries import, wherever it lives, and nothing else: a change to a
// package the operator imports rebuilds it, a change elsewhere does not.
func TestRepoDepsCoverImportedPackages(t *testing.T) {
	root := t.TempDir()
	write := func(p, body string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.test/repo\n\ngo 1.22\n")
	write("op/cmd/op/main.go", "package main\n\nimport \"example.test/repo/internal/keys\"\n\nfunc main() { keys.Use() }\n")
	write("internal/keys/keys.go", "package keys\n\nfunc Use() {}\n")
	write("internal/other/other.go", "package other\n")
	hash := func() map[string]string {
		t.Helper()
		h, err := hashRepoDeps(context.Background(), "go", filepath.Join(root, "op"), []string{"./cmd/op"})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	before := hash()
	if _, ok := before["internal/keys"]; !ok || len(before) != 2 {
		t.Fatalf("deps %v, want op/cmd/op and internal/keys", before)
	}
	write("internal/other/other.go", "package other\n\nvar X = 1\n")
	if after := hash(); after["internal/keys"] != before["internal/keys"] || len(after) != 2 {
		t.Errorf("a package the operator does not import changed its key: %v → %v", before, after)
	}
	write("internal/keys/keys.go", "package keys\n\nfunc Use() { println() }\n")
	if after := hash(); after["internal/keys"] == before["internal/keys"] {
		t.Error("a change to an imported package of the repository left the key as it was")
	}
}
