package iso

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	diskfs "github.com/diskfs/go-diskfs"
)

var update = flag.Bool("update", false, "rewrite golden files")

var testEpoch = time.Unix(1700000000, 0)

// stageTree makes a small live-layout tree: kernel, initrd, a squashfs
// stand-in, nested folders, a symlink, a long name, and boot files.
func stageTree(t testing.TB, dir string, mtime time.Time) (string, Boot) {
	t.Helper()
	tree := filepath.Join(dir, "tree")
	files := map[string]string{
		"live/vmlinuz":                                       strings.Repeat("kernel", 1000),
		"live/initrd.img":                                    strings.Repeat("initrd", 3000),
		"live/filesystem.squashfs":                           strings.Repeat("squash", 10000),
		"live/zz-bootstick.squashfs":                         "overlay",
		"bundle/bundle.lock":                                 "lock: {}\n",
		"bundle/registry/index.json":                         `{"schemaVersion":2}`,
		"bundle/a/b/c/d/e/f/g/deep.txt":                      "deep",
		"bundle/a-rather-long-file-name-with.many.dots.yaml": "x",
	}
	for name, data := range files {
		p := filepath.Join(tree, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("bundle.lock", filepath.Join(tree, "bundle/lock-link")); err != nil {
		t.Fatal(err)
	}
	boot, err := StageBoot(context.Background(), BootOptions{Tree: tree, Label: "BOOTSTICK", Epoch: testEpoch})
	if err != nil {
		t.Fatal(err)
	}
	_ = filepath.WalkDir(tree, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type()&fs.ModeSymlink == 0 {
			_ = os.Chtimes(p, mtime, mtime)
		}
		return nil
	})
	return tree, boot
}

func writeISO(t testing.TB, tree string, boot Boot, out string) {
	t.Helper()
	err := Write(context.Background(), Options{Tree: tree, Output: out, Label: "BOOTSTICK", Epoch: testEpoch, Boot: &boot})
	if err != nil {
		t.Fatal(err)
	}
}

func TestWriteBootable(t *testing.T) {
	dir := t.TempDir()
	tree, boot := stageTree(t, dir, time.Now())
	out := filepath.Join(dir, "out.iso")
	writeISO(t, tree, boot, out)

	t.Run("xorriso sees BIOS, UEFI and an isohybrid MBR", func(t *testing.T) {
		if _, err := exec.LookPath("xorriso"); err != nil {
			t.Fatalf("xorriso is needed for this test (apt-get install xorriso): %v", err)
		}
		raw, err := exec.Command("xorriso", "-indev", out, "-report_el_torito", "plain", "-report_system_area", "plain").CombinedOutput()
		if err != nil {
			t.Fatalf("xorriso: %v\n%s", err, raw)
		}
		// compare with runs of blanks squeezed
		var lines []string
		for _, l := range strings.Split(string(raw), "\n") {
			lines = append(lines, strings.Join(strings.Fields(l), " "))
		}
		rep := []byte(strings.Join(lines, "\n"))
		for _, want := range []string{
			"El Torito boot img : 1 BIOS y none 0x0000 0x00 4 ",
			"El Torito boot img : 2 UEFI y none 0x0000 0x00 ",
			"El Torito img opts : 1 boot-info-table isohybrid-suitable",
			"El Torito img path : 2 /boot/efi.img",
			"System area summary: MBR isohybrid",
			"Volume id : 'BOOTSTICK'",
			"MBR partition : 1 0x80 0x17 0 ",
			"MBR partition : 2 0x00 0xef ",
			"MBR partition path : 2 /boot/efi.img",
		} {
			if !bytes.Contains(rep, []byte(want)) {
				t.Errorf("xorriso report lacks %q:\n%s", want, rep)
			}
		}
	})

	t.Run("go-diskfs reads the file list", func(t *testing.T) {
		d, err := diskfs.Open(out, diskfs.WithOpenMode(diskfs.ReadOnly))
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		fsys, err := d.GetFilesystem(0)
		if err != nil {
			t.Fatal(err)
		}
		var list []string
		err = fs.WalkDir(fsys, ".", func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if p == "." {
				return nil
			}
			info, err := e.Info()
			if err != nil {
				return err
			}
			switch {
			case e.IsDir():
				list = append(list, p+"/")
			case info.Mode()&fs.ModeSymlink != 0:
				list = append(list, p+" symlink")
			default:
				list = append(list, fmt.Sprintf("%s %d", p, info.Size()))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		sort.Strings(list)
		golden(t, "testdata/filelist.golden", []byte(strings.Join(list, "\n")+"\n"))

		f, err := fsys.Open("live/vmlinuz")
		if err != nil {
			t.Fatal(err)
		}
		buf := new(bytes.Buffer)
		if _, err := buf.ReadFrom(f); err != nil {
			t.Fatal(err)
		}
		if buf.String() != strings.Repeat("kernel", 1000) {
			t.Errorf("live/vmlinuz content differs (%d bytes)", buf.Len())
		}
	})

	t.Run("sector 17 is the boot record and sector 0 an MBR", func(t *testing.T) {
		f, err := os.Open(out)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		b := make([]byte, sectorSize)
		if _, err := f.ReadAt(b, 17*sectorSize); err != nil {
			t.Fatal(err)
		}
		if b[0] != 0 || string(b[7:30]) != "EL TORITO SPECIFICATION" {
			t.Errorf("sector 17 is not the El Torito boot record: % x", b[:32])
		}
		fi, _ := f.Stat()
		if fi.Size()%alignment != 0 {
			t.Errorf("image size %d is not a multiple of %d", fi.Size(), alignment)
		}
	})

	t.Run("the tree is left as it was", func(t *testing.T) {
		if _, err := os.Stat(filepath.Join(tree, "live/vmlinuz")); err != nil {
			t.Error(err)
		}
		if _, err := os.Stat(filepath.Join(tree, boot.Catalog)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("boot catalog leaked into the tree: %v", err)
		}
		leftovers, _ := filepath.Glob(filepath.Join(dir, ".iso-workspace-*"))
		leftovers2, _ := filepath.Glob(filepath.Join(dir, ".out.iso.tmp-*"))
		if len(leftovers)+len(leftovers2) > 0 {
			t.Errorf("temporary files left behind: %v %v", leftovers, leftovers2)
		}
	})
}

func TestReproducible(t *testing.T) {
	// Two trees with different mtimes and atimes (set, years apart),
	// ctimes and inode numbers give the same bytes. That the clock at
	// writing leaks nowhere is checked below on the dates themselves:
	// every one in the image is the epoch.
	dir1, dir2 := t.TempDir(), t.TempDir()
	tree1, boot1 := stageTree(t, dir1, time.Unix(1500000000, 0))
	tree2, boot2 := stageTree(t, dir2, time.Unix(1600000000, 0))
	out1, out2 := filepath.Join(dir1, "a.iso"), filepath.Join(dir2, "b.iso")
	writeISO(t, tree1, boot1, out1)
	writeISO(t, tree2, boot2, out2)
	checkDates(t, out1, testEpoch)
	a, _ := os.ReadFile(out1)
	b, _ := os.ReadFile(out2)
	if !bytes.Equal(a, b) {
		if os.Getenv("KEEP") != "" {
			_ = os.WriteFile("/tmp/a.iso", a, 0o644)
			_ = os.WriteFile("/tmp/b.iso", b, 0o644)
		}
		for i := range a {
			if i >= len(b) || a[i] != b[i] {
				t.Fatalf("images differ: sizes %d and %d, first difference at byte %d (sector %d offset %d)", len(a), len(b), i, i/sectorSize, i%sectorSize)
			}
		}
		t.Fatalf("images differ in size: %d and %d", len(a), len(b))
	}

	// A different epoch gives different dates.
	out3 := filepath.Join(dir2, "c.iso")
	if err := Write(context.Background(), Options{Tree: tree2, Output: out3, Label: "BOOTSTICK", Epoch: testEpoch.Add(time.Hour), Boot: &boot2}); err != nil {
		t.Fatal(err)
	}
	c, _ := os.ReadFile(out3)
	if bytes.Equal(b, c) {
		t.Error("a different epoch gave the same bytes")
	}
}

// checkDates reads every date back from an image: the primary volume
// descriptor's (ECMA-119 8.4.26: created and modified are the epoch,
// expiry and effective unset) and every file's and folder's.
func checkDates(t *testing.T, image string, epoch time.Time) {
	t.Helper()
	f, err := os.Open(image)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pvd := make([]byte, sectorSize)
	if _, err := f.ReadAt(pvd, 16*sectorSize); err != nil {
		t.Fatal(err)
	}
	stamp := epoch.UTC().Format("20060102150405") + "00\x00"
	for _, d := range []struct {
		what string
		at   int
		want string
	}{
		{"creation", 813, stamp},
		{"modification", 830, stamp},
		{"expiration", 847, "0000000000000000\x00"},
		{"effective", 864, "0000000000000000\x00"},
	} {
		if got := string(pvd[d.at : d.at+17]); got != d.want {
			t.Errorf("the volume's %s date is %q, want %q", d.what, got, d.want)
		}
	}

	disk, err := diskfs.Open(image, diskfs.WithOpenMode(diskfs.ReadOnly))
	if err != nil {
		t.Fatal(err)
	}
	defer disk.Close()
	fsys, err := disk.GetFilesystem(0)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	var walk func(dir string)
	walk = func(dir string) {
		ents, err := fsys.ReadDir(dir)
		if err != nil {
			t.Fatalf("reading %s in the image: %v", dir, err)
		}
		for _, e := range ents {
			if e.Name() == "." || e.Name() == ".." {
				continue
			}
			seen++
			p := path.Join(dir, e.Name())
			if info, err := e.Info(); err != nil {
				t.Errorf("%s: %v", p, err)
			} else if !info.ModTime().Equal(epoch) {
				t.Errorf("%s: dated %v, want %v", p, info.ModTime().UTC(), epoch.UTC())
			}
			if e.IsDir() {
				walk(p)
			}
		}
	}
	walk(".")
	if seen < 10 {
		t.Errorf("read %d files and folders back from the image, want the whole tree", seen)
	}
}

func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	tree, boot := stageTree(t, dir, time.Now())
	out := filepath.Join(dir, "out.iso")

	huge := filepath.Join(dir, "hugetree")
	if err := os.MkdirAll(filepath.Join(huge, "os-images"), 0o755); err != nil {
		t.Fatal(err)
	}
	hugeFile := filepath.Join(huge, "os-images", "big.qcow2")
	f, err := os.Create(hugeFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(MaxFileSize + 1); err != nil { // sparse: no disk used
		t.Fatal(err)
	}
	f.Close()
	fifoTree := filepath.Join(dir, "fifotree")
	if err := os.MkdirAll(fifoTree, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(fifoTree, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}

	missingParent := boot
	missingParent.EFIImage = "nowhere/efi.img"
	badCatalog := boot
	badCatalog.Catalog = "no/such/dir/boot.cat"

	tests := []struct {
		name string
		opts Options
		want []string
	}{
		{"file over 4 GiB", Options{Tree: huge, Output: out, Label: "X"}, []string{hugeFile, "under 4 GiB"}},
		{"special file", Options{Tree: fifoTree, Output: out, Label: "X"}, []string{"pipe", "named pipe"}},
		{"bad label", Options{Tree: tree, Output: out, Label: "my stick"}, []string{"Label", "A-Z"}},
		{"missing tree", Options{Tree: filepath.Join(dir, "nope"), Output: out, Label: "X"}, []string{"Tree"}},
		{"missing output folder", Options{Tree: tree, Output: filepath.Join(dir, "nope", "x.iso"), Label: "X"}, []string{"Output", "create it first"}},
		{"boot image in a missing folder", Options{Tree: tree, Output: out, Label: "X", Boot: &missingParent}, []string{"nowhere/efi.img", "missing"}},
		{"boot catalog in a missing folder", Options{Tree: tree, Output: out, Label: "X", Boot: &badCatalog}, []string{"no/such/dir/boot.cat", "folder is missing"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Write(context.Background(), tc.opts)
			if err == nil {
				t.Fatal("Write succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if _, err := os.Stat(out); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("output exists after a failure: %v", err)
			}
		})
	}
}

// TestUnwritableOutput mounts a tiny tmpfs and a read-only one (root only).
func TestUnwritableOutput(t *testing.T) {
	if testing.Short() {
		t.Skip("mounts tmpfs file systems: needs root; integration tier")
	}
	dir := t.TempDir()
	tree, boot := stageTree(t, dir, time.Now())
	full := filepath.Join(dir, "full")
	ro := filepath.Join(dir, "ro")
	for _, m := range []struct{ dir, opts string }{{full, "size=256k"}, {ro, "ro,size=16m"}} {
		if err := os.Mkdir(m.dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("mount", "-t", "tmpfs", "-o", m.opts, "tmpfs", m.dir).CombinedOutput(); err != nil {
			t.Fatalf("mount tmpfs (this test needs root): %v: %s", err, out)
		}
		t.Cleanup(func() { _ = exec.Command("umount", m.dir).Run() })
	}
	tests := []struct {
		name, dir string
		want      string
	}{
		{"full", full, "no space left"},
		{"read-only", ro, "cannot write"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(tc.dir, "bootstick.iso")
			err := Write(context.Background(), Options{Tree: tree, Output: out, Label: "BOOTSTICK", Boot: &boot})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.dir) {
				t.Fatalf("error %v; want one saying %q and naming %s", err, tc.want, tc.dir)
			}
			ents, _ := os.ReadDir(tc.dir)
			if len(ents) != 0 {
				t.Errorf("files left in %s: %v", tc.dir, ents)
			}
		})
	}
}

func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (run with -update to accept):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// TestWriteAppended appends a partition after the ISO (as xorriso's
// -append_partition would): MBR partition 3 of the given type, a whole
// MiB starting where the ISO's partition 1 ends, holding the bytes given.
func TestWriteAppended(t *testing.T) {
	dir := t.TempDir()
	tree, boot := stageTree(t, dir, testEpoch)
	mark := bytes.Repeat([]byte("appended "), 50)
	boot.Appended, boot.AppendedType = mark, 0xda
	out := filepath.Join(dir, "out.iso")
	writeISO(t, tree, boot, out)

	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	e1, e3 := data[446:462], data[478:494]
	end1 := int64(binary.LittleEndian.Uint32(e1[12:16])) * 512
	start3 := int64(binary.LittleEndian.Uint32(e3[8:12])) * 512
	size3 := int64(binary.LittleEndian.Uint32(e3[12:16])) * 512
	if e3[4] != 0xda || start3 != end1 || size3 != 1<<20 {
		t.Fatalf("partition 3: type %#x at byte %d, %d bytes; want 0xda at %d (partition 1's end), 1 MiB", e3[4], start3, size3, end1)
	}
	if int64(len(data)) != start3+size3 {
		t.Errorf("the image is %d bytes, want %d (it ends with partition 3)", len(data), start3+size3)
	}
	if !bytes.Equal(data[start3:start3+int64(len(mark))], mark) {
		t.Error("partition 3 does not start with the appended bytes")
	}
	if raw, err := exec.Command("xorriso", "-indev", out, "-report_system_area", "plain").CombinedOutput(); err != nil {
		t.Fatalf("xorriso: %v\n%s", err, raw)
	} else if rep := strings.Join(strings.Fields(string(raw)), " "); !strings.Contains(rep, "MBR partition : 3 0x00 0xda ") {
		t.Errorf("xorriso does not see partition 3:\n%s", raw)
	}
}
