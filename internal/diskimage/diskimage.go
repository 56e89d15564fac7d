// Package diskimage makes a bootable whole-disk image of a Debian root, the
// compute OS that Ironic writes to a host's disk: GPT with a BIOS boot
// partition, an EFI system partition and an ext4 root, and GRUB for both
// firmwares. It needs no loop device and no mount: the root file system is
// made with mkfs.ext4 -d, the EFI partition with go-diskfs, and GRUB's BIOS
// stage is laid down as grub-bios-setup would, for one contiguous core.
//
// UEFI boots the root's own signed chain, as Debian installs it on a
// removable path: shim (signed by Microsoft's UEFI CA) as
// EFI/BOOT/BOOTX64.EFI, Debian's signed GRUB beside it, and a grub.cfg in
// EFI/debian (the signed GRUB's built-in prefix) that finds the root by its
// UUID. So a host boots it with Secure Boot on or off, and under Secure
// Boot shim checks GRUB and GRUB (through shim) the kernel, both against
// Debian's CA.
//
// The root's kernel command line, fstab and cloud-init settings are written
// here, so any Debian root with a kernel and cloud-init becomes a host image
// that takes its network and keys from the config drive Ironic writes.
package diskimage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/partition/gpt"

	"github.com/bootstick/bootstick/internal/command"
	"github.com/bootstick/bootstick/internal/fatimg"
)

// Options say how large the disk is and where the BIOS boot loader comes
// from.
type Options struct {
	SizeMiB int
	Epoch   time.Time
	// Work is a scratch folder.
	Work string
	// GrubPCDir holds GRUB's modules for BIOS; Debian's folder when empty.
	GrubPCDir string
}

// Layout names how Build lays an image out; a change to it is a new
// value, so that a cached image of the old layout is built again.
const Layout = "diskimage/v2: BIOS GRUB, UEFI shim and signed GRUB from the root"

// The root's signed UEFI loaders (packages shim-signed and
// grub-efi-amd64-signed), and where each goes on the EFI partition.
var signedLoaders = []struct{ from, to, pkg string }{
	{"usr/lib/shim/shimx64.efi.signed", "EFI/BOOT/BOOTX64.EFI", "shim-signed"},
	{"usr/lib/grub/x86_64-efi-signed/grubx64.efi.signed", "EFI/BOOT/grubx64.efi", "grub-efi-amd64-signed"},
}

// signedGrubConfig is where Debian's signed GRUB reads its configuration:
// its built-in prefix, /EFI/debian, on the partition it was loaded from.
const signedGrubConfig = "EFI/debian/grub.cfg"

// Needs are the programs Build runs.
var Needs = []string{"mkfs.ext4", "grub-mkimage", "qemu-img"}

const (
	sector    = 512
	biosStart = 2048 // LBA of the BIOS boot partition (and of core.img)
	biosEnd   = 4095 // 1 MiB
	espStart  = 4096
)

// grubModules are built into the BIOS loader, so the disk needs no module
// folder: GPT, ext4, the search by UUID, and the Linux loader. (Debian's
// signed GRUB for UEFI has them built in too.)
var grubModules = []string{"part_gpt", "part_msdos", "ext2", "fat", "search", "search_fs_uuid",
	"configfile", "normal", "linux", "echo", "test", "gzio", "xzio", "zstd", "serial", "terminal", "all_video", "sleep"}

// Build writes the qcow2 image of root to out.
func Build(ctx context.Context, root, out string, o Options) error {
	for _, n := range Needs {
		if _, err := exec.LookPath(n); err != nil {
			return fmt.Errorf("disk image: %s is missing (apt-get install e2fsprogs grub-common qemu-utils): %w", n, err)
		}
	}
	if o.GrubPCDir == "" {
		o.GrubPCDir = "/usr/lib/grub/i386-pc"
	}
	uuid := stableUUID(root, o.Epoch)
	kernel, initrd, err := bootFiles(root)
	if err != nil {
		return err
	}
	if err := configure(root, uuid, kernel, initrd); err != nil {
		return err
	}

	// The loaders find the root by its UUID and read its grub.cfg.
	early := fmt.Sprintf("search --no-floppy --fs-uuid --set=root %s\nset prefix=($root)/boot/grub\nconfigfile $prefix/grub.cfg\n", uuid)
	earlyFile := filepath.Join(o.Work, "early.cfg")
	if err := os.WriteFile(earlyFile, []byte(early), 0o644); err != nil {
		return fmt.Errorf("disk image: %w", err)
	}
	core := filepath.Join(o.Work, "core.img")
	if _, err := command.Run(ctx, command.Options{}, append([]string{"grub-mkimage", "-O", "i386-pc", "-d", o.GrubPCDir,
		"-p", "/boot/grub", "-c", earlyFile, "-o", core, "biosdisk"}, grubModules...)...); err != nil {
		return fmt.Errorf("disk image: GRUB for BIOS: %w", err)
	}
	espFiles := map[string][]byte{signedGrubConfig: []byte(early)}
	for _, l := range signedLoaders {
		data, err := os.ReadFile(filepath.Join(root, l.from))
		if err != nil {
			return fmt.Errorf("disk image: the UEFI loader %s: add %s to the root's packages: %w", l.from, l.pkg, err)
		}
		espFiles[l.to] = data
	}
	esp, err := fatimg.Build(espFiles, o.Epoch)
	if err != nil {
		return fmt.Errorf("disk image: %w", err)
	}

	size := int64(o.SizeMiB) << 20
	espSectors := uint64(len(esp)+sector-1) / sector
	rootStart := (espStart + espSectors + 2047) / 2048 * 2048
	// The backup GPT takes the last 33 sectors.
	rootEnd := uint64(size/sector) - 34
	rootBytes := int64(rootEnd-rootStart+1) * sector
	rootImg := filepath.Join(o.Work, "root.ext4")
	mkfsCmd, env := mkfs(root, o.Epoch)
	if _, err := command.Run(ctx, command.Options{Env: env}, append(mkfsCmd, "-q", "-F", "-L", "root", "-U", uuid,
		"-E", "root_owner=0:0,hash_seed="+uuid, "-d", root, rootImg, strconv.FormatInt(rootBytes/1024, 10)+"k")...); err != nil {
		return fmt.Errorf("disk image: making the root file system (is sizeMiB large enough?): %w", err)
	}

	raw := filepath.Join(o.Work, "disk.raw")
	d, err := diskfs.Create(raw, size, diskfs.SectorSizeDefault)
	if err != nil {
		return fmt.Errorf("disk image: %w", err)
	}
	table := &gpt.Table{LogicalSectorSize: sector, PhysicalSectorSize: sector, ProtectiveMBR: true,
		GUID: stableGUID(uuid, "disk"),
		Partitions: []*gpt.Partition{
			{Index: 1, Start: biosStart, End: biosEnd, Type: gpt.BIOSBoot, Name: "bios", GUID: stableGUID(uuid, "bios")},
			{Index: 2, Start: espStart, End: espStart + espSectors - 1, Type: gpt.EFISystemPartition, Name: "efi", GUID: stableGUID(uuid, "efi")},
			{Index: 3, Start: rootStart, End: rootEnd, Type: gpt.LinuxFilesystem, Name: "root", GUID: stableGUID(uuid, "root")},
		}}
	if err := d.Partition(table); err != nil {
		return fmt.Errorf("disk image: partitioning: %w", err)
	}
	if err := d.Close(); err != nil {
		return fmt.Errorf("disk image: %w", err)
	}
	f, err := os.OpenFile(raw, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("disk image: %w", err)
	}
	defer f.Close()
	if err := writeBIOSBoot(f, o.GrubPCDir, core); err != nil {
		return err
	}
	if _, err := f.WriteAt(esp, espStart*sector); err != nil {
		return fmt.Errorf("disk image: %w", err)
	}
	if err := copySparse(f, rootImg, int64(rootStart)*sector); err != nil {
		return fmt.Errorf("disk image: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("disk image: %w", err)
	}
	tmp := out + ".tmp"
	defer os.Remove(tmp)
	if _, err := command.Run(ctx, command.Options{}, "qemu-img", "convert", "-q", "-f", "raw", "-O", "qcow2", "-c", raw, tmp); err != nil {
		return fmt.Errorf("disk image: %w", err)
	}
	return os.Rename(tmp, out)
}

// bootFiles are the newest kernel and its initrd, as paths in the root.
func bootFiles(root string) (string, string, error) {
	kernels, _ := filepath.Glob(filepath.Join(root, "boot", "vmlinuz-*"))
	if len(kernels) == 0 {
		return "", "", fmt.Errorf("disk image: no kernel in %s/boot: add linux-image-amd64 to the root's packages", root)
	}
	sort.Strings(kernels)
	k := kernels[len(kernels)-1]
	version := strings.TrimPrefix(filepath.Base(k), "vmlinuz-")
	initrd := filepath.Join(root, "boot", "initrd.img-"+version)
	if _, err := os.Stat(initrd); err != nil {
		return "", "", fmt.Errorf("disk image: no initrd for kernel %s: add initramfs-tools to the root's packages", version)
	}
	return "/boot/" + filepath.Base(k), "/boot/" + filepath.Base(initrd), nil
}

// configure writes what makes the root boot from this disk and take its
// settings from Ironic's config drive.
func configure(root, uuid, kernel, initrd string) error {
	files := map[string]string{
		"etc/fstab": fmt.Sprintf("UUID=%s / ext4 errors=remount-ro 0 1\n", uuid),
		"boot/grub/grub.cfg": fmt.Sprintf(`set timeout=1
serial --unit=0 --speed=115200
terminal_input console serial
terminal_output console serial
menuentry "Debian" {
	search --no-floppy --fs-uuid --set=root %s
	linux %s root=UUID=%s ro console=tty0 console=ttyS0,115200n8
	initrd %s
}
`, uuid, kernel, uuid, initrd),
		// Ironic writes a config drive (a partition labelled config-2);
		// nothing else is asked, so boot does not wait on the network
		// for metadata services that are not there.
		"etc/cloud/cloud.cfg.d/90-bootstick.cfg": "datasource_list: [ConfigDrive, None]\n",
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := filepath.Join(root, n)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("disk image: %w", err)
		}
		if err := os.WriteFile(p, []byte(files[n]), 0o644); err != nil {
			return fmt.Errorf("disk image: %w", err)
		}
	}
	return nil
}

// writeBIOSBoot lays GRUB's BIOS stages down as grub-bios-setup does for a
// core.img in one piece: core.img at the start of the BIOS boot partition,
// its first sector's block list pointing at the rest, and boot.img in the
// MBR's code area pointing at core.img (the partition table is kept).
func writeBIOSBoot(f *os.File, grubPCDir, corePath string) error {
	boot, err := os.ReadFile(filepath.Join(grubPCDir, "boot.img"))
	if err != nil {
		return fmt.Errorf("disk image: GRUB for BIOS: %w", err)
	}
	core, err := os.ReadFile(corePath)
	if err != nil {
		return fmt.Errorf("disk image: GRUB for BIOS: %w", err)
	}
	if len(boot) != sector {
		return fmt.Errorf("disk image: %s is %d bytes, not one sector", filepath.Join(grubPCDir, "boot.img"), len(boot))
	}
	sectors := (len(core) + sector - 1) / sector
	if sectors > biosEnd-biosStart+1 {
		return fmt.Errorf("disk image: GRUB's core.img (%d sectors) does not fit the BIOS boot partition", sectors)
	}
	core = append(core, make([]byte, sectors*sector-len(core))...)
	// The block list at the end of diskboot.img: the start and length of
	// the rest of core.img.
	list := core[sector-12 : sector]
	binary.LittleEndian.PutUint64(list[0:8], biosStart+1)
	binary.LittleEndian.PutUint16(list[8:10], uint16(sectors-1))
	// boot.img: where core.img starts (GRUB_BOOT_MACHINE_KERNEL_SECTOR),
	// and take the boot drive from the BIOS (GRUB_BOOT_MACHINE_BOOT_DRIVE).
	binary.LittleEndian.PutUint64(boot[0x5c:0x64], biosStart)
	boot[0x64] = 0xff
	if _, err := f.WriteAt(core, biosStart*sector); err != nil {
		return fmt.Errorf("disk image: %w", err)
	}
	// Only the code area: the disk signature, the protective MBR's
	// partition entry and the boot signature stay.
	if _, err := f.WriteAt(boot[:440], 0); err != nil {
		return fmt.Errorf("disk image: %w", err)
	}
	return nil
}

// copySparse copies a file into f at off, skipping blocks of zeros (f is
// new and sparse: they read as zeros already).
func copySparse(f *os.File, src string, off int64) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	buf := make([]byte, 1<<20)
	zero := make([]byte, len(buf))
	for pos := int64(0); ; {
		n, err := io.ReadFull(in, buf)
		if n > 0 && !bytes.Equal(buf[:n], zero[:n]) {
			if _, werr := f.WriteAt(buf[:n], off+pos); werr != nil {
				return werr
			}
		}
		pos += int64(n)
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// mkfs is the command that makes the root's file system, and its
// environment. A root with its own mke2fs gets it, run through the root's
// own dynamic loader, libraries and mke2fs.conf: the file system has the
// features the root's e2fsck knows, and e2fsprogs 1.47.1 and later set
// every inode's and the superblock's times to SOURCE_DATE_EPOCH (the
// build machine's 1.47.0 keeps the times the files have here, and the
// superblock's write time), so the image is reproducible. A root without
// one (a test's) is made with this machine's mkfs.ext4.
func mkfs(root string, epoch time.Time) (argv, env []string) {
	ts := strconv.FormatInt(epoch.Unix(), 10)
	env = []string{"SOURCE_DATE_EPOCH=" + ts, "E2FSPROGS_FAKE_TIME=" + ts}
	libs := filepath.Join(root, "usr/lib/x86_64-linux-gnu")
	loader := filepath.Join(libs, "ld-linux-x86-64.so.2")
	own := filepath.Join(root, "usr/sbin/mke2fs")
	if !regular(loader) || !regular(own) {
		return []string{"mkfs.ext4"}, env
	}
	if conf := filepath.Join(root, "etc/mke2fs.conf"); regular(conf) {
		env = append(env, "MKE2FS_CONFIG="+conf)
	}
	return []string{loader, "--library-path", libs, own, "-t", "ext4"}, env
}

// regular reports whether p is a regular file (after symbolic links).
func regular(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// stableUUID names the root file system: the same root and epoch give the
// same UUID, so the image is reproducible.
func stableUUID(root string, epoch time.Time) string {
	h := sha256.Sum256([]byte("bootstick-root " + filepath.Base(root) + " " + strconv.FormatInt(epoch.Unix(), 10)))
	return formatUUID(h[:16])
}

func stableGUID(uuid, what string) string {
	h := sha256.Sum256([]byte(uuid + " " + what))
	return strings.ToUpper(formatUUID(h[:16]))
}

func formatUUID(b []byte) string {
	b[6] = b[6]&0x0f | 0x40 // version 4 layout
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
