package stick

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
)

// mountTmpfs mounts a small tmpfs (root only) for the output tests.
func mountTmpfs(t *testing.T, opts string) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, opts); err != nil {
		t.Fatalf("mounting a tmpfs (these tests need root): %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}

func TestOutputLocation(t *testing.T) {
	if testing.Short() {
		t.Skip("mounts tmpfs file systems: needs root")
	}
	for _, tc := range []struct {
		name, opts, want string
	}{
		{"read-only", "ro,size=4m", "cannot write in"},
		{"full", "size=1m", "no space left"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "")
			e.out = mountTmpfs(t, tc.opts)
			_, err := Build(context.Background(), e.options("bootstick.iso"))
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), e.out) {
				t.Fatalf("got %v, want an error naming %s and %q", err, e.out, tc.want)
			}
			ents, _ := os.ReadDir(e.out)
			for _, en := range ents {
				t.Errorf("left behind: %s", en.Name())
			}
		})
	}
}
