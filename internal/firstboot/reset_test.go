package firstboot

import (
	"os"
	"path/filepath"
	"testing"
)

func TestRemoveAllButKeepsTheStateUntilLast(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	state := filepath.Join(data, "firstboot")
	for _, p := range []string{filepath.Join(data, "etcd", "member"), state, filepath.Join(data, "containerd")} {
		os.MkdirAll(p, 0o755)
	}
	os.WriteFile(filepath.Join(state, "state.json"), []byte("{}"), 0o644)
	if err := removeAllBut(data, state); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(data, "etcd")); err == nil {
		t.Error("etcd folder kept")
	}
	if _, err := os.Stat(filepath.Join(state, "state.json")); err != nil {
		t.Error("the state was removed before the end")
	}
	other := filepath.Join(dir, "other")
	os.MkdirAll(other, 0o755)
	if err := removeAllBut(other, state); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(other); err == nil {
		t.Error("an unrelated folder was kept")
	}
	if err := removeAllBut(filepath.Join(dir, "missing"), state); err != nil {
		t.Errorf("a missing folder: %v", err)
	}
}
