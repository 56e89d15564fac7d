package iso

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/bootstick/bootstick/internal/command"
	"github.com/bootstick/bootstick/internal/fatimg"
)

// DefaultKernelArgs boot the Debian live system with a serial console.
// panic=10: an appliance nobody watches reboots 10 s after a kernel panic
// and firstboot resumes, rather than hanging until someone power-cycles
// it (the kubelet sets kernel.panic=10 too, but only once it runs).
var DefaultKernelArgs = []string{"boot=live", "components", "console=ttyS0,115200", "console=tty0", "panic=10"}

// The boot loaders come from Debian packages on the build host: isolinux
// and syslinux-common for BIOS, grub-efi-amd64-bin (and grub-common's
// grub-mkimage) for UEFI.
const (
	DefaultISOLinux   = "/usr/lib/ISOLINUX/isolinux.bin"
	DefaultMBR        = "/usr/lib/ISOLINUX/isohdpfx.bin"
	DefaultLDLinux    = "/usr/lib/syslinux/modules/bios/ldlinux.c32"
	DefaultGrubEFIDir = "/usr/lib/grub/x86_64-efi"
)

// Live layout inside the tree.
const (
	Kernel = "live/vmlinuz"
	Initrd = "live/initrd.img"
)

// grubModules are built into the EFI loader, so the ISO needs no module
// folder.
var grubModules = []string{
	"normal", "configfile", "search", "search_label", "search_fs_file", "iso9660", "fat",
	"part_msdos", "part_gpt", "linux", "echo", "test", "serial", "terminal", "gzio",
	"all_video", "efi_gop", "efi_uga", "video_bochs", "video_cirrus", "ls", "cat",
}

// BootOptions say how the tree boots.
type BootOptions struct {
	// Tree is the staged tree; StageBoot adds isolinux/, boot/grub/ and
	// boot/efi.img to it. The kernel and initrd are expected at Kernel and
	// Initrd when the image boots.
	Tree string
	// Label is the volume label (the same as Options.Label): GRUB finds the
	// medium by it.
	Label string
	// KernelArgs is the kernel command line; nil means DefaultKernelArgs.
	KernelArgs []string
	// Title is the menu entry's name.
	Title string
	// Epoch stamps the files in the FAT image (SOURCE_DATE_EPOCH).
	Epoch time.Time
	// Host files; empty means the Debian defaults above.
	ISOLinux, LDLinux, MBR, GrubEFIDir string
}

// StageBoot lays the boot loaders and their configuration into the tree and
// returns the Boot to hand to Write.
func StageBoot(ctx context.Context, o BootOptions) (Boot, error) {
	if o.ISOLinux == "" {
		o.ISOLinux = DefaultISOLinux
	}
	if o.LDLinux == "" {
		o.LDLinux = DefaultLDLinux
	}
	if o.MBR == "" {
		o.MBR = DefaultMBR
	}
	if o.GrubEFIDir == "" {
		o.GrubEFIDir = DefaultGrubEFIDir
	}
	if o.KernelArgs == nil {
		o.KernelArgs = DefaultKernelArgs
	}
	if o.Title == "" {
		o.Title = "bootstick"
	}
	if !labelRE.MatchString(o.Label) {
		return Boot{}, fmt.Errorf("boot label %q must be 1 to 32 characters of A-Z, 0-9 and _", o.Label)
	}
	for _, p := range []struct{ path, pkg string }{
		{o.ISOLinux, "isolinux"}, {o.LDLinux, "syslinux-common"}, {o.MBR, "isolinux"},
		{filepath.Join(o.GrubEFIDir, "linux.mod"), "grub-efi-amd64-bin"},
	} {
		if _, err := os.Stat(p.path); err != nil {
			return Boot{}, fmt.Errorf("boot loader file %s is missing (apt-get install %s): %w", p.path, p.pkg, err)
		}
	}
	if _, err := exec.LookPath("grub-mkimage"); err != nil {
		return Boot{}, fmt.Errorf("grub-mkimage is missing (apt-get install grub-common): %w", err)
	}

	args := strings.Join(o.KernelArgs, " ")
	put := func(rel string, data []byte) error {
		p := filepath.Join(o.Tree, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("staging boot files: %w", err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return fmt.Errorf("staging boot files: %w", err)
		}
		return nil
	}
	for _, c := range []struct{ src, dst string }{
		{o.ISOLinux, "isolinux/isolinux.bin"},
		{o.LDLinux, "isolinux/ldlinux.c32"},
	} {
		data, err := os.ReadFile(c.src)
		if err != nil {
			return Boot{}, fmt.Errorf("staging boot files: %w", err)
		}
		if err := put(c.dst, data); err != nil {
			return Boot{}, err
		}
	}
	isolinuxCfg := fmt.Sprintf(`SERIAL 0 115200
DEFAULT live
PROMPT 0
TIMEOUT 0
LABEL live
  MENU LABEL %s
  KERNEL /%s
  APPEND initrd=/%s %s
`, o.Title, Kernel, Initrd, args)
	if err := put("isolinux/isolinux.cfg", []byte(isolinuxCfg)); err != nil {
		return Boot{}, err
	}
	grubCfg := fmt.Sprintf(`serial --unit=0 --speed=115200
terminal_input console serial
terminal_output console serial
set timeout=0
menuentry %q {
  linux /%s %s
  initrd /%s
}
`, o.Title, Kernel, args, Initrd)
	if err := put("boot/grub/grub.cfg", []byte(grubCfg)); err != nil {
		return Boot{}, err
	}

	efi, err := grubEFI(ctx, o)
	if err != nil {
		return Boot{}, err
	}
	img, err := fatimg.Build(map[string][]byte{"EFI/BOOT/BOOTX64.EFI": efi}, o.Epoch)
	if err != nil {
		return Boot{}, err
	}
	if err := put("boot/efi.img", img); err != nil {
		return Boot{}, err
	}
	return Boot{
		BIOSImage: "isolinux/isolinux.bin",
		EFIImage:  "boot/efi.img",
		Catalog:   "isolinux/boot.cat",
		MBR:       o.MBR,
	}, nil
}

// grubEFI builds a GRUB EFI loader that finds the medium by its label and
// reads /boot/grub/grub.cfg from it.
func grubEFI(ctx context.Context, o BootOptions) ([]byte, error) {
	dir, err := os.MkdirTemp("", "bootstick-grub-*")
	if err != nil {
		return nil, fmt.Errorf("building the GRUB EFI loader: %w", err)
	}
	defer os.RemoveAll(dir)
	early := fmt.Sprintf("search --no-floppy --set=root --label %s\nset prefix=($root)/boot/grub\nconfigfile $prefix/grub.cfg\n", o.Label)
	if err := os.WriteFile(filepath.Join(dir, "early.cfg"), []byte(early), 0o644); err != nil {
		return nil, fmt.Errorf("building the GRUB EFI loader: %w", err)
	}
	out := filepath.Join(dir, "BOOTX64.EFI")
	args := append([]string{"-O", "x86_64-efi", "-d", o.GrubEFIDir, "-p", "/boot/grub",
		"-c", filepath.Join(dir, "early.cfg"), "-o", out}, grubModules...)
	if _, err := command.Run(ctx, command.Options{}, append([]string{"grub-mkimage"}, args...)...); err != nil {
		return nil, fmt.Errorf("building the GRUB EFI loader: %w", err)
	}
	return os.ReadFile(out)
}
