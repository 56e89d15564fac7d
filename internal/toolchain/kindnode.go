package toolchain

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/gobuild"
	"github.com/bootstick/bootstick/internal/ociarchive"
	"github.com/bootstick/bootstick/internal/ocibuild"
	"github.com/bootstick/bootstick/internal/recipes"
	"github.com/bootstick/bootstick/internal/toolchain/record"
)

// PreloadPath is where a kind node image keeps the images its containerd
// imports at boot, as one OCI archive.
const PreloadPath = "kind/images/preload.tar"

// buildKindNode makes a kind node image: the Debian root, kind's node
// files from its module, the Kubernetes binaries, /kind/version and the
// preloaded images, as one layer.
func buildKindNode(ctx context.Context, opts Options, goCmd string, im *recipes.Image, bins map[string]cas.Digest,
	images map[string]ocibuild.Image, kubeVersion string) (ocibuild.Image, record.Root, bool, error) {
	k := im.KindNode
	if kubeVersion == "" {
		return ocibuild.Image{}, record.Root{}, false, fmt.Errorf("image %s: a kind node image needs the kubeadm recipe (it writes /kind/version)", im.Ref)
	}
	nodeBins := map[string]cas.Digest{}
	for _, b := range k.Binaries {
		nodeBins[b] = bins[b]
	}
	var preload []ocibuild.Image
	preloadDigests := map[string]cas.Digest{}
	for _, ref := range k.Preload {
		p, ok := images[ref]
		if !ok {
			return ocibuild.Image{}, record.Root{}, false, fmt.Errorf("image %s: preload %s: no such image in the recipes", im.Ref, ref)
		}
		preload = append(preload, p)
		preloadDigests[ref] = p.Manifest
	}
	// The module's content is pinned by its version (the checksum
	// database checks it); the rest by digest.
	product := map[string]any{"image": im, "binaries": nodeBins, "preload": preloadDigests, "kubernetes": kubeVersion}
	rec, src, built, err := withRoot(ctx, opts, "image "+im.Ref, im.Debian, product, func(root string, rec *rootRecord) error {
		entries, err := ocibuild.TreeEntries(root)
		if err != nil {
			return err
		}
		// Fetched only to build: a cached image needs no module.
		kindDir, err := gobuild.ModuleDir(ctx, goCmd, k.Base)
		if err != nil {
			return err
		}
		base := filepath.Join(kindDir, "images", "base", "files")
		for _, f := range k.Files {
			if entries, err = kindFiles(base, f, entries); err != nil {
				return fmt.Errorf("kind's node files (%s): %w", k.Base, err)
			}
		}
		for _, b := range k.Binaries {
			entries = append(entries, ocibuild.HostFile("/usr/bin/"+b, 0o755, opts.Store.BlobPath(bins[b])))
		}
		tmp, err := opts.Store.TempDir("preload-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		tar := filepath.Join(tmp, "preload.tar")
		if err := writePreload(opts.Store, preload, k.Preload, filepath.Join(tmp, "oci"), tar); err != nil {
			return err
		}
		entries = append(entries,
			ocibuild.Dir("/etc/kubernetes/manifests", 0o755),
			ocibuild.File("/kind/version", 0o644, []byte(kubeVersion+"\n")),
			ocibuild.HostFile("/"+PreloadPath, 0o644, tar))
		return oneLayerImage(opts, im, entries, rec)
	})
	if err != nil {
		return ocibuild.Image{}, record.Root{}, false, err
	}
	return *rec.Image, rec.root(im.Debian, src), built, nil
}

// writePreload writes the images as one OCI archive at dest, each under
// its tag and its digest name, as `ctr images import` takes it, through a
// layout at dir.
func writePreload(s *cas.Store, images []ocibuild.Image, refs []string, dir, dest string) error {
	if err := ocibuild.WriteLayout(s, dir, images); err != nil {
		return err
	}
	f, err := os.OpenFile(dest, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if err := ociarchive.Write(dir, refs, f); err != nil {
		f.Close()
		return fmt.Errorf("preloaded images: %w", err)
	}
	return f.Close()
}

// kindFiles appends the entries of a file or a tree (rel, below base) of
// kind's node files. The module cache keeps no modes: a file that starts
// with #! is made executable, the rest readable.
func kindFiles(base, rel string, entries []ocibuild.Entry) ([]ocibuild.Entry, error) {
	err := filepath.WalkDir(filepath.Join(base, rel), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		r, err := filepath.Rel(base, p)
		if err != nil {
			return err
		}
		ip := "/" + filepath.ToSlash(r)
		if d.IsDir() {
			entries = append(entries, ocibuild.Dir(ip, 0o755))
			return nil
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file", p)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		mode := fs.FileMode(0o644)
		if bytes.HasPrefix(data, []byte("#!")) {
			mode = 0o755
		}
		entries = append(entries, ocibuild.File(ip, mode, data))
		return nil
	})
	return entries, err
}
