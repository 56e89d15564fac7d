// Package iso writes a bootable hybrid ISO 9660 image from a staged
// directory tree with go-diskfs.
//
// The image carries Rock Ridge and Joliet names, El Torito entries for BIOS
// (no emulation, boot-info table, load size 4) and UEFI (a FAT image), and an
// isohybrid-style MBR so that the same file boots from a CD drive and, written
// raw, from a USB disk, in BIOS and in UEFI firmware. Long names are Rock
// Ridge's; there is no Joliet tree (go-diskfs v1.9.4 writes a broken one).
//
// go-diskfs v1.9.4 has gaps that this package closes:
//   - Finalize deletes the workspace it was given: Write hands it a throwaway
//     tree of hard links (copies where links are impossible).
//   - It writes no hybrid MBR: Write adds one (hybrid.go).
//   - Files over 4 GiB are silently cut short: Write refuses them.
//   - Dates come from the clock and the files' atime/ctime: Write rewrites
//     every date in the volume descriptors, directory records and Rock Ridge
//     TF entries to Options.Epoch, so the output is byte-reproducible.
//   - It panics when a boot file's parent folder is missing: Write checks
//     the boot files first.
//   - With Joliet on, the El Torito boot record lands in sector 18, where
//     BIOS firmware does not look: fixup keeps it in sector 17 in any case.
package iso

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/filesystem/iso9660"
	"golang.org/x/sys/unix"
)

const (
	sectorSize = 2048
	// MaxFileSize is the largest file an ISO 9660 directory record can
	// describe in one extent (its size field is 32 bits).
	MaxFileSize = math.MaxUint32
	// alignment of the finished image: isohybrid pads to whole cylinders of
	// 64 heads x 32 sectors x 512 bytes so partition tables stay consistent.
	alignment = 1 << 20
)

// Boot names the boot files inside the tree. Paths are slash-separated and
// relative to the tree's root. StageBoot lays them out and returns a Boot.
type Boot struct {
	// BIOSImage is the El Torito no-emulation image (isolinux.bin). It gets
	// a boot-info table and a load size of 4 sectors.
	BIOSImage string
	// EFIImage is the FAT image holding /EFI/BOOT/BOOTX64.EFI.
	EFIImage string
	// Catalog is where the boot catalog is placed (e.g. isolinux/boot.cat).
	Catalog string
	// MBR is the host path of the isohybrid MBR boot code (isohdpfx.bin);
	// its first 432 bytes go into the image's first sector. Empty means no
	// hybrid MBR.
	MBR string
	// Appended, with MBR, is written after the ISO as a partition of its
	// own (MBR partition 3 of type AppendedType, padded to a MiB), as
	// xorriso's -append_partition does: a small writable area on a dd'd
	// stick (package stickkey's key slot).
	Appended     []byte
	AppendedType byte
}

// Options says what to write and where.
type Options struct {
	// Tree is the staged directory whose content becomes the ISO's root.
	// It is not modified.
	Tree string
	// Output is the path of the ISO. It is written to a temporary file in
	// the same folder and renamed into place.
	Output string
	// Label is the volume identifier: 1 to 32 characters of A-Z, 0-9 and _.
	Label string
	// Epoch is the date stamped on every file, folder and volume descriptor
	// (SOURCE_DATE_EPOCH). The zero time means the Unix epoch.
	Epoch time.Time
	// Boot, when set, makes the image bootable.
	Boot *Boot
	// Mode is the ISO file's permissions; 0 means 0644. An image that
	// carries secrets is written 0600.
	Mode os.FileMode
}

var labelRE = regexp.MustCompile(`^[A-Z0-9_]{1,32}$`)

// Write writes the ISO described by opts. On any failure nothing is left at
// opts.Output (an older file there is left untouched).
func Write(ctx context.Context, opts Options) error {
	if err := opts.validate(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	st, err := scanTree(opts.Tree)
	if err != nil {
		return err
	}
	if opts.Boot != nil {
		if err := checkBoot(opts.Tree, *opts.Boot); err != nil {
			return err
		}
	}

	outDir := filepath.Dir(opts.Output)
	tmp, err := os.CreateTemp(outDir, "."+filepath.Base(opts.Output)+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing ISO %s: %w", opts.Output, explain(err, outDir))
	}
	tmpName := tmp.Name()
	ok := false
	defer func() {
		if !ok {
			_ = tmp.Close()
			_ = os.Remove(tmpName)
		}
	}()
	// Reserve the space up front so that a full disk fails fast and clearly
	// instead of half way through (go-diskfs ignores some write errors).
	if err := unix.Fallocate(int(tmp.Fd()), 0, 0, st.estimate()); err != nil &&
		!errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.ENOSYS) {
		return fmt.Errorf("writing ISO %s: reserving %d MiB: %w", opts.Output, st.estimate()>>20, explain(err, outDir))
	}

	ws, err := makeWorkspace(ctx, opts.Tree, st)
	if err != nil {
		return err
	}
	defer os.RemoveAll(ws)

	fs, err := iso9660.Create(file.New(tmp, false), 0, 0, sectorSize, ws)
	if err != nil {
		return fmt.Errorf("writing ISO %s: %w", opts.Output, err)
	}
	fo := iso9660.FinalizeOptions{
		RockRidge: true,
		// go-diskfs v1.9.4's Joliet tree points subdirectory records at the
		// ISO 9660 extents, so Joliet readers see garbage below the root:
		// leave it out (Rock Ridge carries the long names).
		Joliet:           false,
		VolumeIdentifier: opts.Label,
	}
	if b := opts.Boot; b != nil {
		bios := &iso9660.ElToritoEntry{
			Platform:  iso9660.BIOS,
			Emulation: iso9660.NoEmulation,
			BootFile:  "/" + b.BIOSImage,
			BootTable: true,
		}
		bios.SetLoadSize(4)
		efi := &iso9660.ElToritoEntry{
			Platform:  iso9660.EFI,
			Emulation: iso9660.NoEmulation,
			BootFile:  "/" + b.EFIImage,
		}
		fo.ElTorito = &iso9660.ElTorito{
			BootCatalog: "/" + b.Catalog,
			Entries:     []*iso9660.ElToritoEntry{bios, efi},
		}
	}
	if err := fs.Finalize(fo); err != nil {
		return fmt.Errorf("writing ISO %s: %w", opts.Output, explain(err, outDir))
	}
	if err := ctx.Err(); err != nil {
		return err
	}

	size, err := fixup(tmp, opts)
	if err != nil {
		return fmt.Errorf("writing ISO %s: %w", opts.Output, explain(err, outDir))
	}
	if err := tmp.Truncate(size); err != nil {
		return fmt.Errorf("writing ISO %s: %w", opts.Output, explain(err, outDir))
	}
	mode := opts.Mode.Perm()
	if mode == 0 {
		mode = 0o644
	}
	if err := tmp.Chmod(mode); err != nil {
		return fmt.Errorf("writing ISO %s: %w", opts.Output, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("writing ISO %s: %w", opts.Output, explain(err, outDir))
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing ISO %s: %w", opts.Output, explain(err, outDir))
	}
	if err := os.Rename(tmpName, opts.Output); err != nil {
		return fmt.Errorf("writing ISO %s: %w", opts.Output, err)
	}
	ok = true
	if d, err := os.Open(outDir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

func (o Options) validate() error {
	var probs []string
	if o.Tree == "" {
		probs = append(probs, "Tree: required")
	} else if fi, err := os.Stat(o.Tree); err != nil {
		probs = append(probs, fmt.Sprintf("Tree: %v", err))
	} else if !fi.IsDir() {
		probs = append(probs, fmt.Sprintf("Tree: %s is not a folder", o.Tree))
	}
	if o.Output == "" {
		probs = append(probs, "Output: required")
	} else if fi, err := os.Stat(filepath.Dir(o.Output)); err != nil {
		probs = append(probs, fmt.Sprintf("Output: folder %s: %v (create it first)", filepath.Dir(o.Output), err))
	} else if !fi.IsDir() {
		probs = append(probs, fmt.Sprintf("Output: %s is not a folder", filepath.Dir(o.Output)))
	}
	if !labelRE.MatchString(o.Label) {
		probs = append(probs, fmt.Sprintf("Label: %q must be 1 to 32 characters of A-Z, 0-9 and _", o.Label))
	}
	if o.Boot != nil {
		if o.Boot.BIOSImage == "" || o.Boot.EFIImage == "" || o.Boot.Catalog == "" {
			probs = append(probs, "Boot: BIOSImage, EFIImage and Catalog are all required")
		}
	}
	if len(probs) > 0 {
		return fmt.Errorf("iso options: %s", strings.Join(probs, "; "))
	}
	return nil
}

// checkBoot makes sure every boot path and its parent folder exist in the
// tree (go-diskfs panics on a missing parent).
func checkBoot(tree string, b Boot) error {
	for _, p := range []struct{ what, path string }{
		{"BIOS boot image", b.BIOSImage},
		{"EFI boot image", b.EFIImage},
	} {
		full := filepath.Join(tree, filepath.FromSlash(p.path))
		fi, err := os.Stat(full)
		if err != nil {
			return fmt.Errorf("%s %s is missing from the tree %s (run StageBoot first): %w", p.what, p.path, tree, err)
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("%s %s in the tree %s is not a regular file", p.what, p.path, tree)
		}
	}
	catDir := filepath.Join(tree, filepath.FromSlash(filepathDir(b.Catalog)))
	if fi, err := os.Stat(catDir); err != nil || !fi.IsDir() {
		return fmt.Errorf("boot catalog %s: its folder is missing from the tree %s", b.Catalog, tree)
	}
	if _, err := os.Lstat(filepath.Join(tree, filepath.FromSlash(b.Catalog))); err == nil {
		return fmt.Errorf("boot catalog %s: a file of that name is already in the tree %s", b.Catalog, tree)
	}
	if b.MBR != "" {
		fi, err := os.Stat(b.MBR)
		if err != nil {
			return fmt.Errorf("hybrid MBR code: %w", err)
		}
		if fi.Size() < mbrCodeSize {
			return fmt.Errorf("hybrid MBR code %s is %d bytes; want at least %d", b.MBR, fi.Size(), mbrCodeSize)
		}
	}
	return nil
}

func filepathDir(p string) string {
	if i := strings.LastIndex(p, "/"); i >= 0 {
		return p[:i]
	}
	return "."
}

// explain adds what to do to the errors people hit most: a full disk and a
// folder they may not write to.
func explain(err error, dir string) error {
	switch {
	case errors.Is(err, syscall.ENOSPC):
		return fmt.Errorf("no space left in %s (free some space or choose another --output): %w", dir, err)
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EROFS):
		return fmt.Errorf("cannot write in %s (choose a writable --output): %w", dir, err)
	}
	return err
}

// copyFile copies src to dst (used when a hard link is impossible).
func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode.Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
