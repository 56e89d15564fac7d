// Package ocibuild makes OCI images without a container engine:
// byte-reproducible layers written straight into the content-addressed
// cache, image configs and manifests, and OCI image layouts whose blobs are
// hard links into the cache (a blob shared by two images is stored once).
package ocibuild

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/bootstick/bootstick/internal/cas"
)

// Entry is one file, folder or symlink of a layer.
type Entry struct {
	Path     string // absolute path inside the image, e.g. /usr/local/bin/etcd
	Mode     fs.FileMode
	Source   string // regular file: copy from this host path ...
	Data     []byte // ... or these bytes
	Linkname string // symlink target (Mode has fs.ModeSymlink)
}

// Layer is a stored layer.
type Layer struct {
	Digest cas.Digest `json:"digest"` // of the gzip stream
	DiffID cas.Digest `json:"diffID"` // of the uncompressed tar
	Size   int64      `json:"size"`
}

// File is a regular file entry.
func File(p string, mode fs.FileMode, data []byte) Entry {
	return Entry{Path: p, Mode: mode, Data: data}
}

// HostFile is a regular file entry copied from the host.
func HostFile(p string, mode fs.FileMode, src string) Entry {
	return Entry{Path: p, Mode: mode, Source: src}
}

// Symlink is a symlink entry.
func Symlink(p, target string) Entry {
	return Entry{Path: p, Mode: fs.ModeSymlink | 0o777, Linkname: target}
}

// Dir is a folder entry.
func Dir(p string, mode fs.FileMode) Entry {
	return Entry{Path: p, Mode: fs.ModeDir | mode}
}

// TreeEntries lists the files, folders and symlinks below root as entries
// placed at the same paths in the image. Ownership is dropped (everything
// is root's), modes are kept.
func TreeEntries(root string) ([]Entry, error) {
	var out []Entry
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		ip := "/" + filepath.ToSlash(rel)
		switch {
		case info.Mode().IsDir():
			out = append(out, Dir(ip, info.Mode().Perm()))
		case info.Mode()&fs.ModeSymlink != 0:
			t, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out = append(out, Symlink(ip, t))
		case info.Mode().IsRegular():
			out = append(out, HostFile(ip, info.Mode().Perm()|(info.Mode()&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)), p))
		default:
			return fmt.Errorf("%s: unsupported file type %v", p, info.Mode().Type())
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", root, err)
	}
	return out, nil
}

// WriteLayer stores a gzipped tar of the entries. The tar lists entries
// sorted by path, adds missing parent folders (0755), and gives every entry
// root ownership and the epoch as its time, so the same entries always give
// the same digest. A later entry for the same path replaces an earlier one.
func WriteLayer(store *cas.Store, entries []Entry, epoch time.Time) (Layer, error) {
	byPath := map[string]Entry{}
	for _, e := range entries {
		p := path.Clean("/" + e.Path)
		if p == "/" {
			continue
		}
		e.Path = p
		byPath[p] = e
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			if _, ok := byPath[d]; !ok {
				byPath[d] = Dir(d, 0o755)
			}
		}
	}
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	sort.Strings(paths)

	w, err := store.Create()
	if err != nil {
		return Layer{}, err
	}
	defer w.Abort()
	gz, err := gzip.NewWriterLevel(w, gzip.DefaultCompression)
	if err != nil {
		return Layer{}, err
	}
	diff := sha256.New()
	tw := tar.NewWriter(io.MultiWriter(gz, diff))
	for _, p := range paths {
		if err := writeEntry(tw, byPath[p], epoch); err != nil {
			return Layer{}, fmt.Errorf("layer entry %s: %w", p, err)
		}
	}
	if err := tw.Close(); err != nil {
		return Layer{}, fmt.Errorf("writing layer: %w", err)
	}
	if err := gz.Close(); err != nil {
		return Layer{}, fmt.Errorf("writing layer: %w", err)
	}
	d, err := w.Commit("")
	if err != nil {
		return Layer{}, err
	}
	return Layer{Digest: d, DiffID: cas.Digest("sha256:" + hex.EncodeToString(diff.Sum(nil))), Size: w.Size()}, nil
}

func writeEntry(tw *tar.Writer, e Entry, epoch time.Time) error {
	name := strings.TrimPrefix(e.Path, "/")
	hdr := &tar.Header{
		Name:    name,
		Mode:    int64(e.Mode.Perm()),
		ModTime: epoch,
		Format:  tar.FormatPAX,
	}
	if e.Mode&fs.ModeSetuid != 0 {
		hdr.Mode |= 0o4000
	}
	if e.Mode&fs.ModeSetgid != 0 {
		hdr.Mode |= 0o2000
	}
	if e.Mode&fs.ModeSticky != 0 {
		hdr.Mode |= 0o1000
	}
	switch {
	case e.Mode.IsDir():
		hdr.Typeflag = tar.TypeDir
		hdr.Name += "/"
		return tw.WriteHeader(hdr)
	case e.Mode&fs.ModeSymlink != 0:
		hdr.Typeflag = tar.TypeSymlink
		hdr.Linkname = e.Linkname
		return tw.WriteHeader(hdr)
	}
	hdr.Typeflag = tar.TypeReg
	if e.Source == "" {
		hdr.Size = int64(len(e.Data))
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err := tw.Write(e.Data)
		return err
	}
	f, err := os.Open(e.Source)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	hdr.Size = fi.Size()
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	n, err := io.Copy(tw, f)
	if err != nil {
		return err
	}
	if n != hdr.Size {
		return fmt.Errorf("%s changed while it was read", e.Source)
	}
	return nil
}
