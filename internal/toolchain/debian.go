package toolchain

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/debroot"
	"github.com/bootstick/bootstick/internal/debs"
	"github.com/bootstick/bootstick/internal/diskimage"
	"github.com/bootstick/bootstick/internal/logctx"
	"github.com/bootstick/bootstick/internal/ocibuild"
	"github.com/bootstick/bootstick/internal/ramdisk"
	"github.com/bootstick/bootstick/internal/recipes"
	"github.com/bootstick/bootstick/internal/toolchain/record"
)

// rootRecord is the action record of an image or artifact made of a
// Debian root.
type rootRecord struct {
	Image     *ocibuild.Image     `json:"image,omitempty"`
	Files     []record.File       `json:"files,omitempty"`
	Installed []debroot.Installed `json:"installed"`
}

func (r *rootRecord) Blobs() []cas.Digest {
	var out []cas.Digest
	if r.Image != nil {
		out = append(out, r.Image.Blobs()...)
	}
	for _, f := range r.Files {
		out = append(out, f.Digest)
	}
	return out
}

func (r *rootRecord) root(spec *debroot.Spec, src debs.Sources) record.Root {
	pinned := map[string]string{}
	for _, p := range r.Installed {
		if _, ok := spec.Pins[p.Name]; ok {
			pinned[p.Name] = p.Version
		}
	}
	return record.Root{Suite: spec.Suite, Mirror: src.Mirror, SecurityMirror: src.SecurityMirror, Pinned: pinned, Packages: len(r.Installed)}
}

// withRoot returns the cached record for a Debian root's product (what),
// or builds the root in a scratch folder and hands it to make. The root
// reads the spec's suite with its -updates and -security (debroot/v2), and
// the mirrors are inputs: other sources build it again.
func withRoot(ctx context.Context, opts Options, what string, spec *debroot.Spec, product any, pack func(root string, rec *rootRecord) error) (*rootRecord, debs.Sources, bool, error) {
	s := opts.Store
	src, err := debs.Sources{Suite: spec.Suite}.Complete(opts.mirror)
	if err != nil {
		return nil, src, false, fmt.Errorf("%s: %w", what, err)
	}
	inputs := map[string]any{"action": "debroot/v2", "what": what, "product": product, "sources": src, "epoch": opts.Epoch.Unix()}
	if spec.Files != "" {
		h, err := cas.HashTree(filepath.Join(opts.Spec.Dir, spec.Files))
		if err != nil {
			return nil, src, false, fmt.Errorf("%s: %w", what, err)
		}
		inputs["files"] = h
	}
	var patches []string
	for _, p := range spec.Patches {
		h, _, err := cas.HashFile(filepath.Join(opts.Spec.Dir, p))
		if err != nil {
			return nil, src, false, fmt.Errorf("%s: patch: %w", what, err)
		}
		patches = append(patches, string(h))
	}
	if len(patches) > 0 {
		inputs["patches"] = patches
	}
	key, err := cas.Key(inputs)
	if err != nil {
		return nil, src, false, err
	}
	rec := &rootRecord{}
	if ok, err := s.GetAction(key, rec); err != nil {
		return nil, src, false, err
	} else if ok {
		return rec, src, false, nil
	}
	log := logctx.From(ctx)
	start := time.Now()
	work, err := s.TempDir("debroot-")
	if err != nil {
		return nil, src, false, err
	}
	defer func() {
		if err := debroot.SafeRemove(work); err != nil {
			log.Warn("leaving a build folder behind", "dir", work, "err", err)
		}
	}()
	debCache := filepath.Join(s.Root, "rootfs", "debs")
	if err := os.MkdirAll(debCache, 0o755); err != nil {
		return nil, src, false, fmt.Errorf("%s: %w", what, err)
	}
	root := filepath.Join(work, "root")
	if opts.Progress != nil {
		opts.Progress.Start(what+": mmdebstrap "+strings.Join(src.Suites(), ", "), -1)
	}
	rec.Installed, err = debroot.Build(ctx, *spec, root, debroot.Options{Sources: src, DebCache: debCache, FilesDir: opts.Spec.Dir, Epoch: opts.Epoch})
	if opts.Progress != nil {
		opts.Progress.Done()
	}
	if err != nil {
		return nil, src, false, fmt.Errorf("%s: %w", what, err)
	}
	log.Info("debian root built", "for", what, "suite", spec.Suite, "packages", len(rec.Installed), "took", time.Since(start).Round(time.Second))
	if opts.Progress != nil {
		opts.Progress.Start(what+": packing", -1)
	}
	err = pack(root, rec)
	if opts.Progress != nil {
		opts.Progress.Done()
	}
	if err != nil {
		return nil, src, false, fmt.Errorf("%s: %w", what, err)
	}
	if err := s.PutAction(key, rec); err != nil {
		return nil, src, false, fmt.Errorf("%s: %w", what, err)
	}
	log.Info("built", "what", what, "took", time.Since(start).Round(time.Second))
	return rec, src, true, nil
}

// buildDebianImage makes an image of one layer: the whole Debian root.
func buildDebianImage(ctx context.Context, opts Options, im *recipes.Image) (ocibuild.Image, record.Root, bool, error) {
	rec, src, built, err := withRoot(ctx, opts, "image "+im.Ref, im.Debian, im, func(root string, rec *rootRecord) error {
		entries, err := ocibuild.TreeEntries(root)
		if err != nil {
			return err
		}
		return oneLayerImage(opts, im, entries, rec)
	})
	if err != nil {
		return ocibuild.Image{}, record.Root{}, false, err
	}
	return *rec.Image, rec.root(im.Debian, src), built, nil
}

// oneLayerImage stores the entries as the image's one layer and records
// the image.
func oneLayerImage(opts Options, im *recipes.Image, entries []ocibuild.Entry, rec *rootRecord) error {
	l, err := ocibuild.WriteLayer(opts.Store, entries, opts.Epoch)
	if err != nil {
		return err
	}
	img, err := ocibuild.WriteImage(opts.Store, im.Ref, []ocibuild.Layer{l}, ocibuild.Config{Entrypoint: im.Entrypoint, Env: im.Env}, opts.Epoch)
	if err != nil {
		return err
	}
	rec.Image = &img
	return nil
}

// buildArtifact makes a ramdisk or a disk image of a Debian root.
func buildArtifact(ctx context.Context, opts Options, a *recipes.Artifact) (record.Artifact, record.Root, bool, error) {
	// A disk image is built again when diskimage lays it out anew.
	var product any = a
	if a.Format == recipes.FormatQcow2 {
		product = struct {
			*recipes.Artifact
			Layout string
		}{a, diskimage.Layout}
	}
	rec, src, built, err := withRoot(ctx, opts, "artifact "+a.Name, &a.Debian, product, func(root string, rec *rootRecord) error {
		out, err := opts.Store.TempDir("artifact-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(out)
		switch a.Format {
		case recipes.FormatRamdisk:
			err = ramdisk.Pack(ctx, root, ramdisk.Options{Kernel: filepath.Join(out, a.Files()[0]),
				Initramfs: filepath.Join(out, a.Files()[1]), Modules: a.Modules, Firmware: a.Firmware, Epoch: opts.Epoch})
		case recipes.FormatQcow2:
			err = diskimage.Build(ctx, root, filepath.Join(out, a.Files()[0]), diskimage.Options{SizeMiB: a.SizeMiB, Epoch: opts.Epoch, Work: out})
		default:
			err = fmt.Errorf("unknown format %q", a.Format)
		}
		if err != nil {
			return err
		}
		for _, f := range a.Files() {
			d, n, err := opts.Store.PutFile(filepath.Join(out, f))
			if err != nil {
				return err
			}
			rec.Files = append(rec.Files, record.File{Name: f, Digest: d, Size: n})
		}
		return nil
	})
	if err != nil {
		return record.Artifact{}, record.Root{}, false, err
	}
	return record.Artifact{Name: a.Name, Format: a.Format, Files: rec.Files}, rec.root(&a.Debian, src), built, nil
}
