package firstboot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/bootstick/bootstick/internal/command"

	"github.com/bootstick/bootstick/internal/progress"

	"github.com/bootstick/bootstick/internal/mounts"

	diskfs "github.com/diskfs/go-diskfs"

	"github.com/bootstick/bootstick/internal/bundle"
)

// bundleDir turns the --bundle argument into a folder: a folder is used as
// it is; an ISO file is loop-mounted read-only (once; a resumed run finds
// the mount) and its /bundle is used.
func bundleDir(ctx context.Context, b string, p paths) (string, error) {
	fi, err := os.Stat(b)
	if errors.Is(err, fs.ErrNotExist) && b == liveBundle {
		return "", fmt.Errorf("no bundle at %s: this does not look like a booted bootstick (no live medium); pass --bundle DIR or --bundle FILE.iso", b)
	}
	if err != nil {
		return "", fmt.Errorf("bundle %s: %w", b, err)
	}
	if fi.IsDir() {
		return b, nil
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("bundle %s: neither a folder nor an ISO file", b)
	}
	mnt := p.isoMount()
	abs, err := filepath.Abs(b)
	if err != nil {
		return "", err
	}
	if mounts.Mounted(mnt) {
		return filepath.Join(mnt, "bundle"), nil
	}
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		return "", fmt.Errorf("mounting bundle %s: %w", b, err)
	}
	out, err := command.Run(ctx, command.Options{Tail: 3}, "mount", "-t", "iso9660", "-o", "loop,ro", abs, mnt)
	if err != nil {
		os.Remove(mnt)
		if !strings.Contains(string(out), "unknown filesystem type") {
			return "", fmt.Errorf("mounting bundle %s read-only at %s: %w", b, mnt, err)
		}
		// This kernel cannot mount ISO 9660 (no isofs): copy /bundle out
		// of the image instead, once.
		return extractBundle(abs, p)
	}
	dir := filepath.Join(mnt, "bundle")
	if _, err := os.Stat(filepath.Join(dir, "bundle.lock")); err != nil {
		unmount(mnt)
		return "", fmt.Errorf("bundle %s: the ISO has no /bundle/bundle.lock (not a bootstick ISO?)", b)
	}
	return dir, nil
}

func unmount(dir string) error {
	if _, err := command.Run(context.Background(), command.Options{Tail: 3}, "umount", dir); err != nil {
		return fmt.Errorf("unmounting %s: %w", dir, err)
	}
	return os.Remove(dir)
}

// errNoLock means the folder has no bundle.lock (a bare OCI layout, as
// make toolchain leaves it): there is nothing to verify against.
var errNoLock = errors.New("no bundle.lock")

// verifyBundle checks the bundle folder against its lock
// (bundle.VerifyFS); every problem is reported in one error.
func verifyBundle(ctx context.Context, dir string) (*bundle.Verified, error) {
	lock, err := bundle.ReadLock(filepath.Join(dir, "bundle.lock"))
	if err != nil {
		return nil, err
	}
	if lock == nil {
		return nil, errNoLock
	}
	res, err := bundle.VerifyFS(ctx, os.DirFS(dir), ".", lock, nil, progress.Nop())
	if err != nil {
		return res, err
	}
	if len(res.Problems) > 0 {
		return res, fmt.Errorf("bundle %s does not match its lock (%d problems): %s; the medium is damaged: rebuild or re-write it",
			dir, len(res.Problems), strings.Join(res.Problems, "; "))
	}
	return res, nil
}

// extractBundle copies the ISO's /bundle to the data folder with go-diskfs,
// for kernels without ISO 9660 support. The copy is made in a temporary
// folder and renamed, so a killed copy is never taken for a whole one.
func extractBundle(iso string, p paths) (string, error) {
	dst := filepath.Join(p.Data, "iso-bundle")
	if _, err := os.Stat(filepath.Join(dst, "bundle.lock")); err == nil {
		return dst, nil
	}
	d, err := diskfs.Open(iso, diskfs.WithOpenMode(diskfs.ReadOnly))
	if err != nil {
		return "", fmt.Errorf("opening bundle %s: %w", iso, err)
	}
	defer d.Close()
	fsys, err := d.GetFilesystem(0)
	if err != nil {
		return "", fmt.Errorf("bundle %s: not an ISO 9660 image: %w", iso, err)
	}
	tmp := dst + ".tmp"
	os.RemoveAll(tmp)
	err = fs.WalkDir(fsys, "bundle", func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		out := filepath.Join(tmp, strings.TrimPrefix(p, "bundle"))
		if de.IsDir() {
			return os.MkdirAll(out, 0o755)
		}
		in, err := fsys.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return err
		}
		if _, err := io.Copy(f, in); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	})
	if err != nil {
		os.RemoveAll(tmp)
		return "", fmt.Errorf("copying /bundle out of %s: %w", iso, err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		return "", fmt.Errorf("copying /bundle out of %s: %w", iso, err)
	}
	return dst, nil
}
