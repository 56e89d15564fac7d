package debroot

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPatchesApplyOrFailByName(t *testing.T) {
	root, dir := t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "usr/lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "usr/lib/x.py"), []byte("a = 1\nb = 2\nc = 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	good := "A defect, said in words.\n--- a/usr/lib/x.py\n+++ b/usr/lib/x.py\n@@ -1,3 +1,3 @@\n a = 1\n-b = 2\n+b = 20\n c = 3\n"
	if err := os.WriteFile(filepath.Join(dir, "good.patch"), []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := applyPatches(context.Background(), root, dir, []string{"good.patch"}); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(filepath.Join(root, "usr/lib/x.py")); string(data) != "a = 1\nb = 20\nc = 3\n" {
		t.Errorf("patched file:\n%s", data)
	}
	// Applied already (a new upstream version with the fix): an error that
	// names the patch and says what to do.
	err := applyPatches(context.Background(), root, dir, []string{"good.patch"})
	if err == nil || !strings.Contains(err.Error(), "good.patch") || !strings.Contains(err.Error(), "drop it from the recipe") {
		t.Errorf("a patch that no longer applies: %v", err)
	}
}
