package firstboot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/bootstick/bootstick/internal/mounts"

	diskfs "github.com/diskfs/go-diskfs"

	"github.com/bootstick/bootstick/internal/bundle"
	"github.com/bootstick/bootstick/internal/cas"
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
	out, err := exec.CommandContext(ctx, "mount", "-t", "iso9660", "-o", "loop,ro", abs, mnt).CombinedOutput()
	if err != nil {
		os.Remove(mnt)
		if !strings.Contains(string(out), "unknown filesystem type") {
			return "", fmt.Errorf("mounting bundle %s read-only at %s: %w: %s", b, mnt, err, strings.TrimSpace(string(out)))
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
	out, err := exec.Command("umount", dir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("unmounting %s: %w: %s", dir, err, strings.TrimSpace(string(out)))
	}
	return os.Remove(dir)
}

// verifyResult is what verifyBundle checked.
type verifyResult struct {
	Files, Blobs int
	Bytes        int64
}

// errNoLock means the folder has no bundle.lock (a bare OCI layout, as
// make toolchain leaves it): there is nothing to verify against.
var errNoLock = errors.New("no bundle.lock")

// verifyBundle re-hashes every payload file the lock pins and every blob
// of the registry (each blob's name is its digest), and checks that each
// image of the lock is in the registry's index under its digest. Every
// problem is reported in one error.
func verifyBundle(ctx context.Context, dir string) (verifyResult, error) {
	var res verifyResult
	lock, err := bundle.ReadLock(filepath.Join(dir, "bundle.lock"))
	if err != nil {
		return res, err
	}
	if lock == nil {
		return res, errNoLock
	}
	want := map[string]cas.Digest{}
	for fp, d := range lock.PayloadFiles() {
		want[fp] = d
	}
	blobDir := filepath.Join("registry", "blobs", "sha256")
	blobs, err := os.ReadDir(filepath.Join(dir, blobDir))
	if err != nil {
		return res, fmt.Errorf("bundle %s: %w", dir, err)
	}
	for _, b := range blobs {
		want[filepath.Join(blobDir, b.Name())] = cas.Digest("sha256:" + b.Name())
	}
	names := make([]string, 0, len(want))
	for fp := range want {
		names = append(names, fp)
	}
	sort.Strings(names)

	var (
		mu       sync.Mutex
		problems []string
		wg       sync.WaitGroup
	)
	work := make(chan string)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for fp := range work {
				got, n, err := cas.HashFile(filepath.Join(dir, fp))
				mu.Lock()
				switch {
				case err != nil:
					problems = append(problems, fmt.Sprintf("%s: %v", fp, err))
				case got != want[fp]:
					problems = append(problems, fmt.Sprintf("%s: sha256 %s, the lock says %s", fp, got.Hex(), want[fp].Hex()))
				}
				res.Bytes += n
				if strings.HasPrefix(fp, blobDir) {
					res.Blobs++
				} else {
					res.Files++
				}
				mu.Unlock()
			}
		}()
	}
feed:
	for _, fp := range names {
		select {
		case work <- fp:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return res, err
	}
	if b, err := openBundle(dir); err != nil {
		problems = append(problems, err.Error())
	} else {
		have := map[string]bool{}
		for _, img := range b.images {
			have[img] = true
		}
		for ref := range lock.ImageRefs() {
			if !have[ref] {
				problems = append(problems, fmt.Sprintf("image %s: in the lock, not in the registry's index", ref))
			}
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return res, fmt.Errorf("bundle %s does not match its lock (%d problems): %s; the medium is damaged: rebuild or re-write it",
			dir, len(problems), strings.Join(problems, "; "))
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
