package toolchain

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"time"

	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/debs"
	"github.com/bootstick/bootstick/internal/logctx"
	"github.com/bootstick/bootstick/internal/ocibuild"
	"github.com/bootstick/bootstick/internal/recipes"
)

type imageRecord struct{ ocibuild.Image }

func (r *imageRecord) Blobs() []cas.Digest { return r.Image.Blobs() }

// baseFiles are the base layer every image shares.
var baseFiles = []ocibuild.Entry{
	ocibuild.File("/etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n")),
	ocibuild.File("/etc/group", 0o644, []byte("root:x:0:\nnogroup:x:65534:\n")),
	ocibuild.File("/etc/nsswitch.conf", 0o644, []byte("hosts: files dns\n")),
	ocibuild.Dir("/tmp", 0o777|fs.ModeSticky),
	ocibuild.Dir("/root", 0o700),
}

func baseLayer(s *cas.Store, epoch time.Time) (ocibuild.Layer, error) {
	l, err := ocibuild.WriteLayer(s, baseFiles, epoch)
	if err != nil {
		return l, fmt.Errorf("base layer: %w", err)
	}
	return l, nil
}

func buildImage(ctx context.Context, opts Options, im *recipes.Image, base ocibuild.Layer, bins map[string]cas.Digest, pkgs []debs.Package) (ocibuild.Image, bool, error) {
	s := opts.Store
	imBins := map[string]cas.Digest{}
	for _, b := range im.Binaries {
		imBins[b] = bins[b]
	}
	key, err := cas.Key(map[string]any{
		"action": "image/v1", "image": im, "binaries": imBins, "debs": pkgs,
		"base": base.Digest, "epoch": opts.Epoch.Unix(),
	})
	if err != nil {
		return ocibuild.Image{}, false, err
	}
	rec := &imageRecord{}
	if ok, err := s.GetAction(key, rec); err != nil {
		return ocibuild.Image{}, false, err
	} else if ok {
		return rec.Image, false, nil
	}
	start := time.Now()
	fail := func(err error) (ocibuild.Image, bool, error) {
		return ocibuild.Image{}, false, fmt.Errorf("image %s: %w", im.Ref, err)
	}
	layers := []ocibuild.Layer{base}
	if len(pkgs) > 0 {
		l, err := debLayer(ctx, s, im, pkgs, opts.Epoch)
		if err != nil {
			return fail(err)
		}
		layers = append(layers, l)
	}
	if len(im.Binaries) > 0 {
		var entries []ocibuild.Entry
		for _, b := range im.Binaries {
			entries = append(entries, ocibuild.HostFile(filepath.Join(im.Dir, b), 0o755, s.BlobPath(bins[b])))
		}
		l, err := ocibuild.WriteLayer(s, entries, opts.Epoch)
		if err != nil {
			return fail(err)
		}
		layers = append(layers, l)
	}
	img, err := ocibuild.WriteImage(s, im.Ref, layers, ocibuild.Config{Entrypoint: im.Entrypoint}, opts.Epoch)
	if err != nil {
		return fail(err)
	}
	rec.Image = img
	if err := s.PutAction(key, rec); err != nil {
		return fail(err)
	}
	logctx.From(ctx).Info("image built", "ref", im.Ref, "digest", img.Manifest, "took", time.Since(start).Round(100*time.Millisecond))
	return img, true, nil
}

// debLayer unpacks the image's Debian packages, adds its symlinks, checks
// that every executable finds its shared libraries, and stores the tree as
// one layer.
func debLayer(ctx context.Context, s *cas.Store, im *recipes.Image, pkgs []debs.Package, epoch time.Time) (ocibuild.Layer, error) {
	work, err := s.TempDir("debs-")
	if err != nil {
		return ocibuild.Layer{}, err
	}
	defer os.RemoveAll(work)
	dl, root := filepath.Join(work, "download"), filepath.Join(work, "root")
	for _, d := range []string{dl, root} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return ocibuild.Layer{}, err
		}
	}
	if err := debs.Fetch(ctx, s, pkgs, dl); err != nil {
		return ocibuild.Layer{}, err
	}
	if err := debs.Extract(ctx, s, pkgs, root); err != nil {
		return ocibuild.Layer{}, err
	}
	for link, target := range im.Symlinks {
		p := filepath.Join(root, filepath.FromSlash(link))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return ocibuild.Layer{}, err
		}
		os.Remove(p)
		if err := os.Symlink(target, p); err != nil {
			return ocibuild.Layer{}, fmt.Errorf("symlink %s: %w", link, err)
		}
	}
	// A link or an entrypoint that names nothing fails here, not in a
	// pod: another suite's package may keep its files elsewhere (trixie's
	// busybox-static has /usr/bin/busybox, bookworm's /bin/busybox).
	for link := range im.Symlinks {
		if !inRoot(root, link) {
			return ocibuild.Layer{}, fmt.Errorf("symlink %s -> %s names nothing in the image's Debian packages", link, im.Symlinks[link])
		}
	}
	if len(im.Binaries) == 0 && !inRoot(root, im.Entrypoint[0]) {
		return ocibuild.Layer{}, fmt.Errorf("entrypoint %s is in none of the image's Debian packages", im.Entrypoint[0])
	}
	// Documentation is of no use in an image.
	for _, d := range []string{"usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/lintian"} {
		os.RemoveAll(filepath.Join(root, d))
	}
	if err := ocibuild.CheckSharedLibs(root); err != nil {
		return ocibuild.Layer{}, fmt.Errorf("%w\nadd the Debian packages that provide them to the image's debs in images/recipes.yaml", err)
	}
	entries, err := ocibuild.TreeEntries(root)
	if err != nil {
		return ocibuild.Layer{}, err
	}
	return ocibuild.WriteLayer(s, entries, epoch)
}

// inRoot reports whether the image path p names a file or folder under
// root, following its own links hop by hop inside root (a link in a
// folder above it may be relative only, as Debian's are).
func inRoot(root, p string) bool {
	for hops := 0; hops < 40; hops++ {
		fi, err := os.Lstat(filepath.Join(root, filepath.FromSlash(p)))
		if err != nil {
			return false
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			return true
		}
		target, err := os.Readlink(filepath.Join(root, filepath.FromSlash(p)))
		if err != nil {
			return false
		}
		if !path.IsAbs(target) {
			target = path.Join(path.Dir(p), target)
		}
		p = target
	}
	return false
}
