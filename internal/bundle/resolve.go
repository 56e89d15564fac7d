package bundle

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/config"
	"github.com/bootstick/bootstick/internal/debs"
)

// resolution is one Resolve: the bundle, the previous lock, the resolver
// and the lock being made, with what one part leaves for the next.
type resolution struct {
	b    *Bundle
	prev *Lock
	r    Resolver
	l    *Lock
	// prevDebs are the previous lock's compute-node packages, when they
	// came from the same suite and mirrors.
	prevDebs []debs.Package
	// binaries are the Kubernetes binaries by name, which the compute
	// nodes' packages name.
	binaries map[string]LockedFile
}

// Resolve turns the bundle into a lock. Entries the previous lock pins
// (a Debian package's version, the sha256 of a URL, the digest of an
// image) are kept as they are unless the bundle pins them otherwise.
func Resolve(ctx context.Context, b *Bundle, prev *Lock, r Resolver) (*Lock, error) {
	if prev == nil {
		prev = &Lock{}
	}
	x := &resolution{b: b, prev: prev, r: r, binaries: map[string]LockedFile{},
		l: &Lock{APIVersion: config.APIVersion, Kind: LockKind, Bundle: b.Name, BundleDigest: b.Digest}}
	for _, part := range []func(context.Context) error{x.os, x.kubernetes, x.images, x.packages, x.manifests, x.files, x.payloadPaths} {
		if err := part(ctx); err != nil {
			return nil, err
		}
	}
	return x.l, nil
}

// os locks the live OS's suite, mirrors and packages.
func (x *resolution) os(ctx context.Context) error {
	b, r, l := x.b, x.r, x.l
	src, err := b.OS.Sources(r.Mirror)
	if err != nil {
		return fmt.Errorf("bundle %s: os: %w", b.File, err)
	}
	l.OS = LockedOS{Suite: src.Suite, Mirror: src.Mirror, SecurityMirror: src.SecurityMirror, CompressionLevel: b.OS.CompressionLevel}
	// Package versions are kept from the previous lock only when they
	// came from the same suite and mirrors: another suite has other
	// versions of every package, and a lock made before the security
	// suite was read is made again.
	prevOS, prevDebs := x.prev.OS.Packages, debPackages(x.prev.Packages.Debs)
	if x.prev.OS.Sources() != l.OS.Sources() {
		prevOS, prevDebs = nil, nil
	}
	x.prevDebs = prevDebs
	if r.Debs == nil {
		return nil
	}
	names := append([]string(nil), r.OSPackages...)
	for _, n := range b.OS.Packages {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	pkgs, err := resolveDebs(ctx, r, names, prevOS)
	if err != nil {
		return fmt.Errorf("bundle %s: os.packages: %w", b.File, err)
	}
	l.OS.Packages = pkgs
	return nil
}

// kubernetes locks the release: its binaries and images, from the
// toolchain (with the deploy ramdisk and the OS images it made) or by
// URL.
func (x *resolution) kubernetes(ctx context.Context) error {
	b, r, l := x.b, x.r, x.l
	k := b.Kubernetes
	l.Kubernetes.Version = k.Version
	switch {
	case k.FromToolchain() && r.Toolchain == nil:
		l.Kubernetes.Source = SourceToolchain
		l.Unresolved = append(l.Unresolved, "kubernetes.recipes: built by the toolchain (mkusb toolchain)")
	case k.FromToolchain():
		l.Kubernetes.Source = SourceToolchain
		if err := x.fromToolchain(ctx); err != nil {
			return err
		}
	default:
		l.Kubernetes.Source = SourceURL
		for i, f := range k.Binaries {
			lf, err := resolveFile(ctx, b, r, f, x.prev.Kubernetes.Binaries, fmt.Sprintf("kubernetes.binaries[%d]", i), &l.Unresolved)
			if err != nil {
				return err
			}
			x.binaries[f.Name] = lf
		}
	}
	for i, im := range k.Images {
		li, err := resolveImage(ctx, r, im, x.prev.Images, fmt.Sprintf("kubernetes.images[%d]", i), &l.Unresolved)
		if err != nil {
			return err
		}
		l.Images = append(l.Images, li)
	}
	for _, bin := range x.binaries {
		l.Kubernetes.Binaries = append(l.Kubernetes.Binaries, bin)
	}
	sortFiles(l.Kubernetes.Binaries)
	return nil
}

// fromToolchain takes the toolchain's build: its binaries, images (not
// kind mode's node image, which is for a developer's host) and artifacts.
func (x *resolution) fromToolchain(ctx context.Context) error {
	b, l, k := x.b, x.l, x.b.Kubernetes
	m, err := x.r.Toolchain(ctx, b.Path(k.Recipes))
	if err != nil {
		return err
	}
	if m.KubernetesVersion != "" && m.KubernetesVersion != k.Version {
		return fmt.Errorf("bundle %s: kubernetes.version is %s but the recipes %s build %s: make them agree", b.File, k.Version, k.Recipes, m.KubernetesVersion)
	}
	l.Kubernetes.Go, l.Kubernetes.Recipes = m.Go, m.Recipes
	for _, bin := range m.Binaries {
		x.binaries[bin.Name] = LockedFile{Name: bin.Name, Dest: "packages", Source: SourceToolchain, SHA256: bin.Digest, Size: bin.Size}
	}
	l.Kubernetes.Roots = maps.Clone(m.Roots)
	for _, im := range m.Images {
		if im.KindNode {
			delete(l.Kubernetes.Roots, im.Ref)
			continue
		}
		l.Images = append(l.Images, LockedImage{Ref: im.Ref, Digest: im.Digest, Source: SourceToolchain})
	}
	// The deploy ramdisk and the OS images the toolchain made.
	for _, a := range m.Artifacts {
		for _, f := range a.Files {
			l.Files = append(l.Files, LockedFile{Name: f.Name, Dest: "os-images", Source: SourceToolchain, SHA256: f.Digest, Size: f.Size})
		}
	}
	return nil
}

// images locks the bundle's extra images, and refuses one named twice.
func (x *resolution) images(ctx context.Context) error {
	b, l := x.b, x.l
	for i, im := range b.Images {
		li, err := resolveImage(ctx, x.r, im, x.prev.Images, fmt.Sprintf("images[%d]", i), &l.Unresolved)
		if err != nil {
			return err
		}
		l.Images = append(l.Images, li)
	}
	sort.Slice(l.Images, func(i, j int) bool { return l.Images[i].Ref < l.Images[j].Ref })
	for i := 1; i < len(l.Images); i++ {
		if l.Images[i].Ref == l.Images[i-1].Ref {
			return fmt.Errorf("bundle %s: image %s is named twice (images and the Kubernetes release)", b.File, l.Images[i].Ref)
		}
	}
	return nil
}

// packages locks the compute nodes' packages: the toolchain's binaries
// they name (each with its zstd copy) and their Debian packages.
func (x *resolution) packages(ctx context.Context) error {
	b, r, l := x.b, x.r, x.l
	for i, name := range b.Packages.Binaries {
		bin, ok := x.binaries[name]
		if !ok && l.Kubernetes.Source == SourceToolchain && r.Toolchain == nil {
			l.Unresolved = append(l.Unresolved, fmt.Sprintf("packages.binaries[%d]: %s from the toolchain", i, name))
			continue
		}
		if !ok {
			return fmt.Errorf("bundle %s: packages.binaries[%d]: the toolchain builds no binary %s (images/recipes.yaml names the binaries)", b.File, i, name)
		}
		if r.Compress != nil && bin.SHA256 != "" {
			z, err := r.Compress(ctx, bin)
			if err != nil {
				return fmt.Errorf("bundle %s: packages.binaries[%d] %s: %w", b.File, i, name, err)
			}
			bin.Zstd = &z
		}
		l.Packages.Binaries = append(l.Packages.Binaries, bin)
	}
	if r.Debs == nil {
		return nil
	}
	pkgs, err := resolveDebs(ctx, r, b.Packages.Debs, x.prevDebs)
	if err != nil {
		return fmt.Errorf("bundle %s: packages.debs: %w", b.File, err)
	}
	for _, p := range pkgs {
		l.Packages.Debs = append(l.Packages.Debs, LockedDeb{Package: p, File: DebFile(p)})
	}
	return nil
}

// manifests locks the manifests, each with the digests of the images
// this build made or pulled; one whose images the registry lacks is left
// out when the bundle allows it (manifests.ifImagesPresent).
func (x *resolution) manifests(context.Context) error {
	b, l := x.b, x.l
	mdir := b.Path(b.Manifests.Dir)
	entries, err := os.ReadDir(mdir)
	if err != nil {
		return fmt.Errorf("bundle %s: manifests.dir: %w", b.File, err)
	}
	for _, e := range entries {
		if e.IsDir() || !(strings.HasSuffix(e.Name(), ".yaml") || strings.HasSuffix(e.Name(), ".yml")) {
			continue
		}
		p := filepath.Join(mdir, e.Name())
		src, err := os.ReadFile(p)
		if err != nil {
			return fmt.Errorf("bundle %s: manifests: %w", b.File, err)
		}
		// The manifest ships with the digests of the images this build
		// made or pulled; the lock pins those bytes.
		data := PinImages(src, l.ImageRefs())
		d, n := cas.DigestOf(data), int64(len(data))
		missing, err := manifestImages(p, data, l.ImageRefs(), slices.Contains(b.Manifests.IfImagesPresent, e.Name()))
		if err != nil {
			return fmt.Errorf("bundle %s: %w", b.File, err)
		}
		if len(missing) > 0 {
			l.LeftOut = append(l.LeftOut, LeftOutManifest{Name: e.Name(), Missing: missing})
			continue
		}
		rel, _ := filepath.Rel(b.Dir, p)
		l.Manifests = append(l.Manifests, LockedFile{Name: e.Name(), Dest: "manifests", Source: SourceLocal, Path: filepath.ToSlash(rel), SHA256: d, Size: n})
	}
	if len(l.Manifests) == 0 {
		return fmt.Errorf("bundle %s: manifests.dir %s holds no .yaml files", b.File, b.Manifests.Dir)
	}
	return nil
}

// files locks the bundle's other files.
func (x *resolution) files(ctx context.Context) error {
	l := x.l
	for i, f := range x.b.Files {
		lf, err := resolveFile(ctx, x.b, x.r, f, x.prev.Files, fmt.Sprintf("files[%d]", i), &l.Unresolved)
		if err != nil {
			return err
		}
		l.Files = append(l.Files, lf)
	}
	sortFiles(l.Files)
	return nil
}

// payloadPaths refuses two files that would be the same file of
// /bundle.
func (x *resolution) payloadPaths(context.Context) error {
	b, l := x.b, x.l
	seen := map[string]bool{}
	for _, group := range [][]LockedFile{l.Manifests, l.Files, l.Packages.Binaries} {
		for _, f := range group {
			if seen[f.PayloadPath()] {
				return fmt.Errorf("bundle %s: two files would be /bundle/%s: rename one (name:)", b.File, f.PayloadPath())
			}
			seen[f.PayloadPath()] = true
		}
	}
	for _, d := range l.Packages.Debs {
		if seen["packages/"+d.File] {
			return fmt.Errorf("bundle %s: two files would be /bundle/packages/%s: rename one (name:)", b.File, d.File)
		}
	}
	return nil
}
