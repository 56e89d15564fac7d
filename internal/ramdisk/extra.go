package ramdisk

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/bootstick/bootstick/internal/atomicfile"
)

// File is one file of an extra archive: its path in the ramdisk's root
// (relative), its permission bits and its content.
type File struct {
	Path string
	Mode os.FileMode
	Data []byte
}

// Extra is an uncompressed newc cpio archive of files and the folders
// they sit in, owned by root, dated the epoch. Appended to an initramfs
// (WithExtra), it is unpacked over it: the kernel unpacks each archive of
// a concatenation in turn, compressed or not (the kernel's
// Documentation/driver-api/early-userspace/buffer-format.rst), which is
// how the bootstrap machine gives the deploy ramdisk what it makes at its
// first boot without packing the ramdisk again.
func Extra(files []File) ([]byte, error) {
	var b bytes.Buffer
	dirs := map[string]bool{}
	ino := uint32(1)
	write := func(name string, mode uint32, data []byte) {
		fmt.Fprintf(&b, "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
			ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
		ino++
		b.WriteString(name)
		b.WriteByte(0)
		pad4(&b)
		b.Write(data)
		pad4(&b)
	}
	sorted := slices.Clone(files)
	slices.SortFunc(sorted, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	for _, f := range sorted {
		p := path.Clean(filepath.ToSlash(f.Path))
		if path.IsAbs(p) || p == "." || strings.HasPrefix(p, "../") || p == ".." {
			return nil, fmt.Errorf("ramdisk: extra file %q: want a path inside the root", f.Path)
		}
		var parents []string
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			parents = append(parents, d)
		}
		slices.Reverse(parents)
		for _, d := range parents {
			if !dirs[d] {
				dirs[d] = true
				write(d, 0o040755, nil)
			}
		}
		write(p, 0o100000|uint32(f.Mode.Perm()), f.Data)
	}
	write("TRAILER!!!", 0, nil)
	return b.Bytes(), nil
}

// pad4 pads a newc archive to its 4-byte alignment.
func pad4(b *bytes.Buffer) {
	for b.Len()%4 != 0 {
		b.WriteByte(0)
	}
}

// WithExtra writes base (an initramfs) to w and then extra after zero
// padding to a 512-byte boundary: the kernel skips zeros between
// archives, and an uncompressed one must start 4-byte aligned.
func WithExtra(w io.Writer, base io.Reader, extra []byte) (int64, error) {
	n, err := io.Copy(w, base)
	if err != nil {
		return n, err
	}
	if r := n % 512; r != 0 {
		m, err := w.Write(make([]byte, 512-r))
		n += int64(m)
		if err != nil {
			return n, err
		}
	}
	m, err := w.Write(extra)
	return n + int64(m), err
}

// Derive writes dst: the initramfs base with extra appended (WithExtra),
// through a temporary file renamed into place, so dst is whole or absent.
// It leaves a dst that was derived from the same base (its size and time)
// and the same extra alone, and says whether it wrote. dst+".source"
// records what dst was derived from.
func Derive(base, dst string, extra []byte) (bool, error) {
	bi, err := os.Stat(base)
	if err != nil {
		return false, fmt.Errorf("the deploy ramdisk %s: %w", base, err)
	}
	sum := sha256.Sum256(extra)
	source := fmt.Sprintf("%s size %d modified %d extra sha256:%x\n", base, bi.Size(), bi.ModTime().UnixNano(), sum)
	if old, err := os.ReadFile(dst + ".source"); err == nil && string(old) == source {
		if di, err := os.Stat(dst); err == nil && di.Size() >= bi.Size()+int64(len(extra)) {
			return false, nil
		}
	}
	in, err := os.Open(base)
	if err != nil {
		return false, fmt.Errorf("the deploy ramdisk %s: %w", base, err)
	}
	defer in.Close()
	tmp := dst + ".tmp"
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return false, fmt.Errorf("writing the deploy ramdisk %s: %w", dst, err)
	}
	_, err = WithExtra(out, in, extra)
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		_ = os.Remove(dst + ".source")
		err = os.Rename(tmp, dst)
	}
	if err == nil {
		err = atomicfile.Write(dst+".source", []byte(source), 0o644)
	}
	if err != nil {
		os.Remove(tmp)
		return false, fmt.Errorf("writing the deploy ramdisk %s: %w", dst, err)
	}
	return true, nil
}
