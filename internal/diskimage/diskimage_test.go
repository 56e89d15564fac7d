package diskimage

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/partition/gpt"

	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/qemu"
	"github.com/bootstick/bootstick/internal/testctx"
)

// TestLayout builds an image of a small root and reads it back: a GPT with
// the BIOS boot, EFI and root partitions; GRUB's boot.img in the MBR
// pointing at core.img, whose block list points at the rest of it; the EFI
// loader on the EFI partition; and the root's grub.cfg and fstab naming
// its file system by UUID.
func TestLayout(t *testing.T) {
	for _, n := range append(Needs, "debugfs") {
		if _, err := exec.LookPath(n); err != nil {
			t.Fatalf("%s is needed: %v", n, err)
		}
	}
	root := filepath.Join(t.TempDir(), "root")
	for p, data := range map[string]string{"boot/vmlinuz-6.1.0-1-amd64": "kernel", "boot/initrd.img-6.1.0-1-amd64": "initrd", "etc/hostname": "debian\n",
		"usr/lib/shim/shimx64.efi.signed": "shim", "usr/lib/grub/x86_64-efi-signed/grubx64.efi.signed": "signed grub"} {
		os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755)
		if err := os.WriteFile(filepath.Join(root, p), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	work := t.TempDir()
	out := filepath.Join(t.TempDir(), "disk.qcow2")
	if err := Build(context.Background(), root, out, Options{SizeMiB: 64, Epoch: time.Unix(1700000000, 0), Work: work}); err != nil {
		t.Fatal(err)
	}
	raw := filepath.Join(t.TempDir(), "disk.raw")
	if out, err := exec.Command("qemu-img", "convert", "-f", "qcow2", "-O", "raw", out, raw).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img: %v\n%s", err, out)
	}

	d, err := diskfs.Open(raw, diskfs.WithOpenMode(diskfs.ReadOnly))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	pt, err := d.GetPartitionTable()
	if err != nil {
		t.Fatal(err)
	}
	table, ok := pt.(*gpt.Table)
	if !ok || len(table.Partitions) != 3 {
		t.Fatalf("partition table %T %+v, want GPT with 3 partitions", pt, pt)
	}
	for i, want := range []gpt.Type{gpt.BIOSBoot, gpt.EFISystemPartition, gpt.LinuxFilesystem} {
		if table.Partitions[i].Type != want {
			t.Errorf("partition %d is %s, want %s", i+1, table.Partitions[i].Type, want)
		}
	}

	img, err := os.ReadFile(raw)
	if err != nil {
		t.Fatal(err)
	}
	bootImg, _ := os.ReadFile("/usr/lib/grub/i386-pc/boot.img")
	if !bytes.Equal(img[:0x5c], bootImg[:0x5c]) {
		t.Error("the MBR does not hold GRUB's boot.img")
	}
	if got := binary.LittleEndian.Uint64(img[0x5c:]); got != biosStart {
		t.Errorf("boot.img loads core.img from sector %d, want %d", got, biosStart)
	}
	if img[510] != 0x55 || img[511] != 0xaa {
		t.Error("the MBR lost its boot signature")
	}
	core := img[biosStart*sector : (biosStart+1)*sector]
	if got := binary.LittleEndian.Uint64(core[sector-12:]); got != biosStart+1 {
		t.Errorf("core.img's block list starts at %d, want %d", got, biosStart+1)
	}
	if n := binary.LittleEndian.Uint16(core[sector-4:]); n == 0 {
		t.Error("core.img's block list is empty")
	}

	esp := table.Partitions[1]
	espImg := filepath.Join(t.TempDir(), "esp.img")
	os.WriteFile(espImg, img[esp.Start*sector:(esp.End+1)*sector], 0o644)
	// Secure Boot's chain on the removable path: shim, the signed GRUB
	// beside it, and the configuration where that GRUB looks for it.
	for file, want := range map[string]string{
		"EFI/BOOT/BOOTX64.EFI": "shim",
		"EFI/BOOT/grubx64.efi": "signed grub",
		"EFI/debian/grub.cfg":  "search --no-floppy --fs-uuid --set=root " + stableUUID(root, time.Unix(1700000000, 0)),
	} {
		out, err := exec.Command("mtype", "-i", espImg, "::/"+file).CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), want) {
			t.Errorf("the EFI partition's %s is not the root's (%q): %v\n%s", file, want, err, out)
		}
	}

	rootPart := table.Partitions[2]
	rootImg := filepath.Join(t.TempDir(), "root.ext4")
	os.WriteFile(rootImg, img[rootPart.Start*sector:(rootPart.End+1)*sector], 0o644)
	uuid := stableUUID(root, time.Unix(1700000000, 0))
	for file, want := range map[string]string{
		"/boot/grub/grub.cfg": "linux /boot/vmlinuz-6.1.0-1-amd64 root=UUID=" + uuid,
		"/etc/fstab":          "UUID=" + uuid + " / ext4",
		"/etc/hostname":       "debian",
	} {
		out, err := exec.Command("debugfs", "-R", "cat "+file, rootImg).Output()
		if err != nil || !strings.Contains(string(out), want) {
			t.Errorf("%s in the root file system lacks %q: %v\n%s", file, want, err, out)
		}
	}
	out2, _ := exec.Command("debugfs", "-R", "stats", rootImg).CombinedOutput()
	if !strings.Contains(string(out2), uuid) {
		t.Errorf("the root file system's UUID is not %s", uuid)
	}
}

// TestLayoutNeedsSignedLoaders: a root without Debian's signed shim is
// refused with the package to add, and nothing is left at the target.
func TestLayoutNeedsSignedLoaders(t *testing.T) {
	for _, n := range Needs {
		if _, err := exec.LookPath(n); err != nil {
			t.Fatalf("%s is needed: %v", n, err)
		}
	}
	root := filepath.Join(t.TempDir(), "root")
	for p, data := range map[string]string{"boot/vmlinuz-6.1.0-1-amd64": "kernel", "boot/initrd.img-6.1.0-1-amd64": "initrd",
		"usr/lib/grub/x86_64-efi-signed/grubx64.efi.signed": "signed grub"} {
		os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755)
		if err := os.WriteFile(filepath.Join(root, p), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(t.TempDir(), "disk.qcow2")
	err := Build(context.Background(), root, out, Options{SizeMiB: 64, Epoch: time.Unix(1700000000, 0), Work: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "add shim-signed to the root's packages") {
		t.Fatalf("Build without shim: %v, want the package to add", err)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("%s exists after a failed build: %v", out, err)
	}
}

// TestComputeImageBootsSecureBoot boots the toolchain's compute OS image
// in QEMU, in BIOS and in UEFI with Secure Boot on (OVMF's Secure Boot
// build with Microsoft's keys, as a server ships), to its login prompt:
// GRUB finds the root by UUID, the kernel and initrd mount it, systemd and
// cloud-init start. Under Secure Boot the firmware starts shim, shim the
// signed GRUB, and GRUB the signed kernel, which says Secure Boot is on.
// (UEFI with Secure Boot off boots the same chain in make test's
// provisioning journey.)
func TestComputeImageBootsSecureBoot(t *testing.T) {
	if testing.Short() {
		t.Skip("boots the compute OS image under TCG twice (make toolchain first): integration tier")
	}
	image := filepath.Join(cas.DefaultRoot(), "toolchain", "current", "files", "debian-13-compute.qcow2")
	if _, err := os.Stat(image); err != nil {
		t.Fatalf("%v: run make toolchain first", err)
	}
	// The two boots run side by side: each guest has one vCPU, and this
	// machine two cores, so together they take the time of one.
	for _, fw := range []qemu.Firmware{qemu.BIOS, qemu.UEFISecureBoot} {
		t.Run(string(fw), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			disk := filepath.Join(dir, "disk.qcow2")
			if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", image, disk).CombinedOutput(); err != nil {
				t.Fatalf("qemu-img: %v\n%s", err, out)
			}
			ctx, cancel := testctx.New(t, 8*time.Minute)
			defer cancel()
			vm, err := qemu.Start(ctx, qemu.Options{Dir: dir, Firmware: fw, Disk: disk, MemoryMiB: 1024, CPUs: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer vm.Kill()
			if _, err := vm.WaitSerial(ctx, regexp.MustCompile(`login: `)); err != nil {
				serial, _ := os.ReadFile(vm.SerialLog)
				t.Fatalf("no login prompt: %v\n%s", err, tail(string(serial), 30))
			}
			serial, _ := os.ReadFile(vm.SerialLog)
			if !strings.Contains(string(serial), "cloud-init") {
				t.Errorf("cloud-init did not run:\n%s", tail(string(serial), 30))
			}
			if sb := strings.Contains(string(serial), "secureboot: Secure boot enabled"); sb != (fw == qemu.UEFISecureBoot) {
				t.Errorf("the kernel's log says Secure Boot is on: %v, want %v", sb, fw == qemu.UEFISecureBoot)
			}
		})
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// TestImageIsReproducible builds the image of one root twice, with every
// file's time changed in between, as two builds of the same packages
// leave it: the images are the same to the byte. The root has Debian
// trixie's e2fsprogs (from the toolchain's .deb cache), whose mke2fs sets
// every time to SOURCE_DATE_EPOCH, as the compute image's root has, and
// trixie's signed shim and GRUB.
func TestImageIsReproducible(t *testing.T) {
	if testing.Short() {
		t.Skip("unpacks trixie's e2fsprogs from the toolchain's .deb cache (make toolchain first): integration tier")
	}
	root := filepath.Join(t.TempDir(), "root")
	// e2fsprogs with its libraries, and the signed UEFI loaders.
	for _, pkg := range []string{"libc6", "libblkid1", "libuuid1", "libcom-err2", "libext2fs2t64", "e2fsprogs", "shim-signed", "grub-efi-amd64-signed"} {
		deb := newestDeb(t, filepath.Join(cas.DefaultRoot(), "rootfs", "debs"), pkg)
		if out, err := exec.Command("dpkg-deb", "-x", deb, root).CombinedOutput(); err != nil {
			t.Fatalf("dpkg-deb -x %s: %v\n%s", deb, err, out)
		}
	}
	for p, data := range map[string]string{"boot/vmlinuz-6.12.0-1-amd64": "kernel", "boot/initrd.img-6.12.0-1-amd64": "initrd", "etc/hostname": "debian\n"} {
		os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755)
		if err := os.WriteFile(filepath.Join(root, p), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if argv, _ := mkfs(root, time.Unix(0, 0)); argv[0] == "mkfs.ext4" {
		t.Fatalf("the root's own mke2fs is not used: %v", argv)
	}
	build := func(n int) []byte {
		out := filepath.Join(t.TempDir(), "disk.qcow2")
		if err := Build(context.Background(), root, out, Options{SizeMiB: 64, Epoch: time.Unix(1700000000, 0), Work: t.TempDir()}); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	first := build(1)
	// The second build's files carry other times, as a second mmdebstrap
	// leaves them: every file made or changed while the root is built,
	// after the epoch. A file whose time is older than the epoch keeps
	// it: it is a .deb's own (a second unpacking gives it again), and
	// mke2fs clamps times to SOURCE_DATE_EPOCH, it does not raise them
	// (shim-signed's copyright is from 2019).
	epoch, later := time.Unix(1700000000, 0), time.Now().Add(time.Hour)
	filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode()&os.ModeSymlink == 0 && !fi.ModTime().Before(epoch) {
			os.Chtimes(p, later, later)
		}
		return nil
	})
	if second := build(2); !bytes.Equal(first, second) {
		t.Errorf("two builds of one root differ (%d and %d bytes)", len(first), len(second))
	}
}

// newestDeb is the highest version of pkg's .deb in dir.
func newestDeb(t *testing.T, dir, pkg string) string {
	t.Helper()
	debs, _ := filepath.Glob(filepath.Join(dir, pkg+"_*_amd64.deb"))
	if len(debs) == 0 {
		t.Fatalf("no %s .deb in %s: run make toolchain first", pkg, dir)
	}
	version := func(p string) string { return strings.Split(filepath.Base(p), "_")[1] }
	best := debs[0]
	for _, d := range debs[1:] {
		if exec.Command("dpkg", "--compare-versions", version(d), "gt", version(best)).Run() == nil {
			best = d
		}
	}
	return best
}
