package preflight

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckNamesEveryMissingNeed(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	err := Check(
		Program("mksquashfs", "squashfs-tools"),
		Program("unsquashfs", "squashfs-tools"),
		File(filepath.Join(t.TempDir(), "isolinux.bin"), "isolinux"),
	)
	var me *MissingError
	if !errors.As(err, &me) || len(me.Missing) != 3 {
		t.Fatalf("Check = %v, want all three missing", err)
	}
	msg := err.Error()
	for _, want := range []string{"mksquashfs", "unsquashfs", "isolinux.bin", "apt-get install squashfs-tools isolinux", "make deps"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
}

func TestCheckPassesWhenAllThere(t *testing.T) {
	if err := Check(Program("sh", "dash"), File("/", "base-files")); err != nil {
		t.Fatal(err)
	}
}
