package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "key")
	if err := os.WriteFile(p, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Write(p, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	fi, _ := os.Stat(p)
	if err != nil || string(b) != "new" || fi.Mode().Perm() != 0o600 {
		t.Fatalf("after Write: %q, mode %v, %v", b, fi.Mode().Perm(), err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("folder holds %d entries, want the file alone", len(entries))
	}
	// A failed write leaves the old content and no temporary file.
	if err := Write(filepath.Join(dir, "missing", "x"), []byte("x"), 0o600); err == nil {
		t.Fatal("writing into a missing folder succeeded")
	}
	ro := filepath.Join(dir, "ro")
	os.Mkdir(ro, 0o755)
	os.WriteFile(filepath.Join(ro, "f"), []byte("old"), 0o644)
	os.Chmod(ro, 0o555)
	defer os.Chmod(ro, 0o755)
	if os.Geteuid() != 0 { // root writes anywhere
		if err := Write(filepath.Join(ro, "f"), []byte("new"), 0o644); err == nil {
			t.Fatal("writing into a read-only folder succeeded")
		}
		if b, _ := os.ReadFile(filepath.Join(ro, "f")); string(b) != "old" {
			t.Fatalf("a failed write changed the file to %q", b)
		}
	}
}
