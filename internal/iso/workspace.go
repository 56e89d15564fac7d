package iso

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

type treeEntry struct {
	rel  string // slash-free OS path relative to the tree
	mode fs.FileMode
	size int64
	uid  int
	gid  int
}

type treeScan struct {
	entries []treeEntry
	bytes   int64 // data bytes rounded up to whole sectors
}

// estimate is a generous upper bound on the image size, used to reserve
// disk space before writing.
func (s treeScan) estimate() int64 {
	// volume descriptors, path tables, directories with Rock Ridge and
	// Joliet records (a sector per entry is more than enough), padding.
	return s.bytes + int64(len(s.entries)+64)*sectorSize + alignment
}

// scanTree walks the tree, refuses what ISO 9660 cannot hold (files of
// 4 GiB or more, device nodes, sockets, pipes) and measures it.
func scanTree(tree string) (treeScan, error) {
	var st treeScan
	err := filepath.WalkDir(tree, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("reading tree %s: %w", tree, err)
		}
		rel, err := filepath.Rel(tree, p)
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return fmt.Errorf("reading tree %s: %w", tree, err)
		}
		e := treeEntry{rel: rel, mode: fi.Mode(), size: fi.Size(), uid: -1, gid: -1}
		if s, ok := fi.Sys().(*syscall.Stat_t); ok {
			e.uid, e.gid = int(s.Uid), int(s.Gid)
		}
		switch {
		case fi.IsDir(), fi.Mode()&fs.ModeSymlink != 0:
		case fi.Mode().IsRegular():
			if fi.Size() > MaxFileSize {
				return fmt.Errorf("file %s is %d bytes (%.1f GiB); an ISO 9660 file must be under 4 GiB: split it or leave it out of the tree",
					p, fi.Size(), float64(fi.Size())/(1<<30))
			}
			st.bytes += (fi.Size() + sectorSize - 1) / sectorSize * sectorSize
		default:
			return fmt.Errorf("file %s is a %s (a named pipe, socket or device); an ISO holds only files, folders and symbolic links", p, fi.Mode().Type())
		}
		st.entries = append(st.entries, e)
		return nil
	})
	return st, err
}

// makeWorkspace builds a throwaway mirror of the tree for go-diskfs, whose
// Finalize deletes the folder it works from. Files are hard links (copies
// where the file system refuses links), so the tree itself is never touched
// and no data is copied in the common case.
func makeWorkspace(ctx context.Context, tree string, st treeScan) (string, error) {
	ws, err := os.MkdirTemp(filepath.Dir(filepath.Clean(tree)), ".iso-workspace-*")
	if err != nil {
		ws, err = os.MkdirTemp("", "bootstick-iso-workspace-*")
		if err != nil {
			return "", fmt.Errorf("creating ISO workspace: %w", err)
		}
	}
	fail := func(err error) (string, error) {
		_ = os.RemoveAll(ws)
		return "", err
	}
	var dirs []treeEntry
	for i, e := range st.entries {
		if i%256 == 0 {
			if err := ctx.Err(); err != nil {
				return fail(err)
			}
		}
		src := filepath.Join(tree, e.rel)
		dst := filepath.Join(ws, e.rel)
		switch {
		case e.mode.IsDir():
			if e.rel != "." {
				if err := os.Mkdir(dst, 0o700); err != nil {
					return fail(fmt.Errorf("creating ISO workspace: %w", err))
				}
			}
			dirs = append(dirs, e)
		case e.mode&fs.ModeSymlink != 0:
			target, err := os.Readlink(src)
			if err != nil {
				return fail(fmt.Errorf("reading tree: %w", err))
			}
			if err := os.Symlink(target, dst); err != nil {
				return fail(fmt.Errorf("creating ISO workspace: %w", err))
			}
			chown(dst, e)
		default:
			if err := os.Link(src, dst); err != nil {
				if err := copyFile(src, dst, e.mode); err != nil {
					return fail(fmt.Errorf("copying %s into the ISO workspace: %w", src, err))
				}
				chown(dst, e)
				_ = os.Chmod(dst, e.mode.Perm())
			}
		}
	}
	// Modes last, so a read-only folder can still be filled.
	for _, e := range dirs {
		dst := filepath.Join(ws, e.rel)
		chown(dst, e)
		perm := e.mode.Perm()
		if os.Geteuid() != 0 {
			perm |= 0o700 // so that we can still remove it
		}
		if err := os.Chmod(dst, perm); err != nil {
			return fail(fmt.Errorf("creating ISO workspace: %w", err))
		}
	}
	return ws, nil
}

// chown copies the owner where we may (as root); elsewhere the owner is the
// current user, which is still deterministic for a given builder.
func chown(p string, e treeEntry) {
	if e.uid < 0 {
		return
	}
	if err := os.Lchown(p, e.uid, e.gid); err != nil && !errors.Is(err, fs.ErrPermission) {
		return
	}
}
