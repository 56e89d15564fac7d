package firstboot

import (
	"context"
	"os"
	"path/filepath"
	"strings"
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

// reset refuses a folder firstboot did not make, before it touches
// anything, and names the folder and what to do.
func TestResetRefusesAFolderThatIsNotOurs(t *testing.T) {
	host := t.TempDir()
	keep := filepath.Join(host, "precious")
	if err := os.WriteFile(keep, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := defaultPaths(host)
	p.Run = t.TempDir()
	err := resetHost(context.Background(), p, "")
	if err == nil || !strings.Contains(err.Error(), "refusing to remove "+host) || !strings.Contains(err.Error(), dataMarker) {
		t.Fatalf("reset of a folder that is not ours = %v", err)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("reset removed a file of a folder it refused: %v", err)
	}
	// Marked by firstboot, it passes the check.
	if err := markOurs(host); err != nil {
		t.Fatal(err)
	}
	if err := checkOurs(host); err != nil {
		t.Errorf("checkOurs of a marked folder: %v", err)
	}
	if err := checkOurs(filepath.Join(host, "missing")); err != nil {
		t.Errorf("checkOurs of a missing folder: %v", err)
	}
}
