package datadisk

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/bootstick/bootstick/internal/command"
)

// loopDisk makes a sparse file of size bytes, attaches it to a loop device
// and detaches it at the end.
func loopDisk(t *testing.T, size int64, prep func(path string)) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(f, size); err != nil {
		t.Fatal(err)
	}
	if prep != nil {
		prep(f)
	}
	out, err := command.Output(context.Background(), command.Options{}, "losetup", "-f", "--show", f)
	if err != nil {
		t.Fatalf("losetup: %v", err)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
			t.Errorf("losetup -d %s: %v: %s", dev, err, out)
		}
	})
	return dev
}

// mbr writes a DOS partition table with one partition.
func mbr(path string) {
	b := make([]byte, 512)
	e := b[446:]
	e[4] = 0x83
	binary.LittleEndian.PutUint32(e[8:], 2048)
	binary.LittleEndian.PutUint32(e[12:], 4096)
	b[510], b[511] = 0x55, 0xaa
	f, _ := os.OpenFile(path, os.O_WRONLY, 0)
	f.WriteAt(b, 0)
	f.Close()
}

func mkfs(label string) func(string) {
	return func(path string) {
		exec.Command("mkfs.ext4", "-F", "-q", "-L", label, path).Run()
	}
}

// testOptions uses a label of its own so that other loop devices on this
// machine (other tests) are never taken for ours.
func testOptions(t *testing.T, cands ...string) Options {
	dir := t.TempDir()
	o := Options{
		Label:      fmt.Sprintf("BST%d", os.Getpid()%100000),
		Mount:      filepath.Join(dir, "data"),
		Binds:      map[string]string{filepath.Join(dir, "kubelet"): "kubelet", filepath.Join(dir, "kubernetes"): "kubernetes"},
		Candidates: cands,
		MinSize:    32 << 20,
	}
	t.Cleanup(func() { Detach(o) })
	return o
}

func rootTier(t *testing.T) {
	if testing.Short() {
		t.Skip("formats and mounts loop devices (root)")
	}
	if os.Geteuid() != 0 {
		t.Fatal("needs root: run make test as root")
	}
}

// The first empty disk is formatted, labelled and mounted with the bind
// mounts; after it is detached, a second Prepare finds it by label, mounts
// it again and formats nothing: the data survives.
func TestPrepareFormatsOnceAndFindsByLabel(t *testing.T) {
	rootTier(t)
	ctx := context.Background()
	used := loopDisk(t, 64<<20, mkfs("SOMEONES"))
	parted := loopDisk(t, 64<<20, mbr)
	small := loopDisk(t, 8<<20, nil)
	empty := loopDisk(t, 64<<20, nil)
	o := testOptions(t, used, parted, small, empty)

	res, err := Prepare(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if res.Device != empty || !res.Formatted {
		t.Fatalf("Prepare = %+v, want %s formatted", res, empty)
	}
	for target, sub := range o.Binds {
		if !MountedAt(target) {
			t.Errorf("%s is not bind-mounted", target)
		}
		if err := os.WriteFile(filepath.Join(target, "marker"), []byte(sub), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := Detach(o); err != nil {
		t.Fatal(err)
	}
	if MountedAt(o.Mount) {
		t.Fatal("still mounted after Detach")
	}

	res, err = Prepare(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if res.Device != empty || res.Formatted {
		t.Fatalf("second Prepare = %+v, want %s found, not formatted", res, empty)
	}
	for target, sub := range o.Binds {
		got, err := os.ReadFile(filepath.Join(o.Mount, sub, "marker"))
		if err != nil || string(got) != sub {
			t.Errorf("%s: marker lost across Prepare: %q, %v", target, got, err)
		}
	}
	// The other disks were not touched.
	for dev, want := range map[string]string{used: "ext4", parted: ""} {
		u, err := Inspect(ctx, dev, o.Label)
		if err != nil {
			t.Fatal(err)
		}
		if u.FSType != want || u.Empty() {
			t.Errorf("%s was changed: %+v", dev, u)
		}
	}
}

// A disk in use is refused with a message that says why and what to do,
// unless it is the named disk and wiping is allowed.
func TestPrepareRefusesDisksInUse(t *testing.T) {
	rootTier(t)
	ctx := context.Background()
	used := loopDisk(t, 64<<20, mkfs("SOMEONES"))
	parted := loopDisk(t, 64<<20, mbr)
	mounted := loopDisk(t, 64<<20, mkfs("MOUNTED"))
	mp := t.TempDir()
	if err := syscall.Mount(mounted, mp, "ext4", 0, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Unmount(mp, 0) })

	cases := []struct {
		name   string
		device string
		wipe   bool
		cands  []string
		want   []string // substrings of the error; nil means success
	}{
		{name: "named disk with a file system", device: used,
			want: []string{"bootstrap.dataDisk", "is in use", `ext4 file system labelled "SOMEONES"`, "--wipe-data-disk"}},
		{name: "named disk with partitions", device: parted,
			want: []string{"is in use", "dos partition table"}},
		{name: "named disk mounted, even with wipe", device: mounted, wipe: true,
			want: []string{"is in use", "mounted"}},
		{name: "no empty disk", cands: []string{used, parted, mounted},
			want: []string{"no empty data disk", used + ": in use", "mounted"}},
		{name: "named disk does not exist", device: "/dev/disk/by-id/no-such-disk",
			want: []string{"bootstrap.dataDisk", "no such file"}},
		{name: "named disk wiped when allowed", device: used, wipe: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := testOptions(t, c.cands...)
			if c.cands == nil {
				o.Candidates = []string{}
			}
			o.Device, o.Wipe = c.device, c.wipe
			res, err := Prepare(ctx, o)
			if c.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				if !res.Formatted || !MountedAt(o.Mount) {
					t.Fatalf("Prepare = %+v, not formatted and mounted", res)
				}
				return
			}
			if err == nil {
				t.Fatalf("Prepare = %+v, want an error", res)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if MountedAt(o.Mount) {
				t.Error("mounted after a refusal")
			}
		})
	}
}

// A disk whose format was interrupted carries the pending label: it was
// ours, and is formatted again.
func TestPrepareRedoesInterruptedFormat(t *testing.T) {
	rootTier(t)
	ctx := context.Background()
	o := testOptions(t)
	half := loopDisk(t, 64<<20, mkfs(pendingLabel(o.Label)))
	o.Candidates = []string{half}
	res, err := Prepare(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if res.Device != half || !res.Formatted {
		t.Fatalf("Prepare = %+v, want %s formatted again", res, half)
	}
	u, err := Inspect(ctx, half, o.Label)
	if err != nil {
		t.Fatal(err)
	}
	if u.Label != o.Label {
		t.Errorf("label %q, want %q", u.Label, o.Label)
	}
}

func TestPendingLabel(t *testing.T) {
	for in, want := range map[string]string{"BOOTSTICK-DATA": "~BOOTSTICK-DATA", "ABCDEFGHIJKLMNO": "~ABCDEFGHIJKLMNO"} {
		if got := pendingLabel(in); got != want || len(got) > 16 {
			t.Errorf("pendingLabel(%q) = %q, want %q", in, got, want)
		}
	}
}
