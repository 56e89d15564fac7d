package ramdisk

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestKeepFirmware: the firmware files the kept modules name stay, plain
// or compressed, with every link on the way to them (relative, absolute as
// the ramdisk sees it, in chains, to folders); everything else under
// lib/firmware goes, with the folders left empty. A module none of whose
// files is there fails the build, naming it, and so does a link that
// leads out of the firmware folder.
func TestKeepFirmware(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{
		"bnx2x/bnx2x-e2-7.13.21.0.fw", "bnx2x/bnx2x-e2-7.13.1.0.fw", // an older version: no module asks for it
		"qed/qed_init_values_zipped-8.59.1.0.bin.zst",
		"intel/ice/ddp/ice-1.3.43.0.pkg",
		"intel/ipu/ipu6_fw.bin", // another package's firmware, of no NIC
		"netronome/nic/flower.nffw",
	} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Links: a chain (ice.pkg → ice-current.pkg → the versioned file),
	// an absolute one as the booted ramdisk sees it, and one to a folder.
	for link, target := range map[string]string{
		"intel/ice/ddp/ice.pkg":         "ice-current.pkg",
		"intel/ice/ddp/ice-current.pkg": "ice-1.3.43.0.pkg",
		"bnx2/bnx2-mips-09-6.2.1b.fw":   "/lib/firmware/bnx2x/bnx2x-e2-7.13.21.0.fw",
		"qlogic":                        "qed",
	} {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(link)), 0o755)
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	err := keepFirmware(dir, map[string][]string{
		"bnx2x": {"bnx2x/bnx2x-e1-7.13.21.0.fw", "bnx2x/bnx2x-e2-7.13.21.0.fw"},
		"bnx2":  {"bnx2/bnx2-mips-09-6.2.1b.fw"},
		"qed":   {"qlogic/qed_init_values_zipped-8.59.1.0.bin"},
		"ice":   {"intel/ice/ddp/ice.pkg"},
	})
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		rel, _ := filepath.Rel(dir, p)
		if err == nil && rel != "." {
			left = append(left, rel)
		}
		return err
	})
	want := []string{"bnx2", "bnx2/bnx2-mips-09-6.2.1b.fw", "bnx2x", "bnx2x/bnx2x-e2-7.13.21.0.fw", "intel", "intel/ice", "intel/ice/ddp",
		"intel/ice/ddp/ice-1.3.43.0.pkg", "intel/ice/ddp/ice-current.pkg", "intel/ice/ddp/ice.pkg",
		"qed", "qed/qed_init_values_zipped-8.59.1.0.bin.zst", "qlogic"}
	if !slices.Equal(left, want) {
		t.Errorf("left in lib/firmware:\n%s\nwant:\n%s", strings.Join(left, "\n"), strings.Join(want, "\n"))
	}

	err = keepFirmware(dir, map[string][]string{"tg3": {"tigon/tg3.bin"}})
	if err == nil || !strings.Contains(err.Error(), "module tg3's firmware files [tigon/tg3.bin]") ||
		!strings.Contains(err.Error(), "add the Debian package") {
		t.Errorf("a module without its firmware: %v", err)
	}
	for _, target := range []string{"../../etc/passwd", "/etc/passwd"} {
		os.Remove(filepath.Join(dir, "bnx2x/out"))
		if err := os.Symlink(target, filepath.Join(dir, "bnx2x/out")); err != nil {
			t.Fatal(err)
		}
		err = keepFirmware(dir, map[string][]string{"bnx2x": {"bnx2x/out"}})
		if err == nil || !strings.Contains(err.Error(), "leads out of the firmware folder") {
			t.Errorf("a link to %s: %v", target, err)
		}
	}
}
