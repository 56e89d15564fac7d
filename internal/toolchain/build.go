package toolchain

import (
	"context"
	"fmt"
	"maps"
	"os"
	"runtime"
	"sort"
	"strings"

	"golang.org/x/sync/errgroup"

	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/command"
	"github.com/bootstick/bootstick/internal/debs"
	"github.com/bootstick/bootstick/internal/ocibuild"
	"github.com/bootstick/bootstick/internal/preflight"
	"github.com/bootstick/bootstick/internal/recipes"
	"github.com/bootstick/bootstick/internal/toolchain/record"
)

// Needs are the programs a toolchain build runs besides go: apt and dpkg
// for the Debian packages of the kube-proxy image, mmdebstrap for the
// Debian roots, and what packs the ramdisk and the disk images.
func Needs() []preflight.Need {
	return []preflight.Need{
		preflight.Program("apt-get", "apt"),
		preflight.Program("apt-cache", "apt"),
		preflight.Program("dpkg-deb", "dpkg"),
		preflight.Program("mmdebstrap", "mmdebstrap"),
		preflight.Program("cpio", "cpio"),
		preflight.Program("zstd", "zstd"),
		preflight.Program("depmod", "kmod"),
		preflight.Program("mkfs.ext4", "e2fsprogs"),
		preflight.Program("qemu-img", "qemu-utils"),
		preflight.Program("grub-mkimage", "grub-common"),
		preflight.File("/usr/lib/grub/i386-pc/boot.img", "grub-pc-bin"),
		preflight.File("/usr/lib/grub/x86_64-efi/linux.mod", "grub-efi-amd64-bin"),
	}
}

// Build builds everything the spec names and returns the view.
func Build(ctx context.Context, opts Options) (*Result, error) {
	if err := preflight.Check(Needs()...); err != nil {
		return nil, err
	}
	s := opts.Store
	unlock, err := s.Lock(true)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := s.Clean(); err != nil {
		return nil, err
	}
	goCmd := opts.Go
	if goCmd == "" {
		goCmd = "go"
	}
	goVersion, err := command.Output(ctx, command.Options{}, goCmd, "env", "GOVERSION")
	if err != nil {
		return nil, fmt.Errorf("finding the Go version (%s env GOVERSION): %w", goCmd, err)
	}
	m := Manifest{Go: strings.TrimSpace(string(goVersion)), Epoch: opts.Epoch.Unix(), Actions: map[string]bool{}}

	images := make([]ocibuild.Image, len(opts.Spec.Images))
	built := make([]bool, len(images))
	// The Debian roots (images and artifacts) build beside the Go recipes:
	// mmdebstrap spends much of its time fetching and unpacking packages,
	// the Go compiler on the CPU, so on a fresh machine the two together
	// take minutes less than one after the other. The roots write only
	// their own entries of images and built until debianDone.
	debianCtx, stopDebian := context.WithCancel(ctx)
	defer stopDebian()
	debianDone := make(chan debianParts, 1)
	go func() { debianDone <- buildDebianParts(debianCtx, opts, images, built) }()
	// fail ends the Debian roots' build before Build returns its error.
	fail := func(err error) (*Result, error) {
		stopDebian()
		<-debianDone
		return nil, err
	}

	bins := map[string]cas.Digest{}
	binRecipe := map[string]*recipes.GoRecipe{}
	for i := range opts.Spec.Binaries {
		r := &opts.Spec.Binaries[i]
		label := fmt.Sprintf("recipe %d/%d %s", i+1, len(opts.Spec.Binaries), r.Name)
		rec, recBuilt, err := buildRecipe(ctx, opts, goCmd, m.Go, r, label)
		if err != nil {
			return fail(err)
		}
		m.Actions["recipe "+r.Name] = recBuilt
		m.Recipes = append(m.Recipes, RecipeRecord{Name: r.Name, Source: r.ModVersion()})
		for _, name := range r.BinaryNames() {
			bins[name] = rec.Binaries[name]
			binRecipe[name] = r
			fi, err := os.Stat(s.BlobPath(rec.Binaries[name]))
			if err != nil {
				return fail(fmt.Errorf("recipe %s: binary %s: %w", r.Name, name, err))
			}
			m.Binaries = append(m.Binaries, Binary{Name: name, Recipe: r.Name, Digest: rec.Binaries[name], Size: fi.Size()})
		}
	}
	if kr, ok := binRecipe["kubeadm"]; ok {
		m.KubernetesVersion = kr.Version
		if err := checkKubeadmImages(ctx, s.BlobPath(bins["kubeadm"]), kr.Version, opts.Spec.Images); err != nil {
			return fail(err)
		}
	}

	deb := <-debianDone
	if deb.err != nil {
		return nil, deb.err
	}
	for name, root := range deb.m.Roots {
		m.SetRoot(name, root)
	}
	maps.Copy(m.Actions, deb.m.Actions)
	m.Artifacts = append(m.Artifacts, deb.m.Artifacts...)
	pkgsByImage := make([][]debs.Package, len(opts.Spec.Images))
	for i, im := range opts.Spec.Images {
		pkgs, err := debs.Resolve(ctx, im.Debs)
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", im.Ref, err)
		}
		pkgsByImage[i] = pkgs
	}
	base, err := baseLayer(s, opts.Epoch)
	if err != nil {
		return nil, err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(runtime.NumCPU())
	for i := range opts.Spec.Images {
		if opts.Spec.Images[i].Debian != nil {
			continue
		}
		g.Go(func() error {
			var err error
			images[i], built[i], err = buildImage(gctx, opts, &opts.Spec.Images[i], base, bins, pkgsByImage[i])
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	// Kind node images last: they carry the other images.
	byRef := map[string]ocibuild.Image{}
	for _, im := range images {
		byRef[im.Ref] = im
	}
	for i := range opts.Spec.Images {
		im := &opts.Spec.Images[i]
		if im.KindNode == nil {
			continue
		}
		var root record.Root
		var err error
		images[i], root, built[i], err = buildKindNode(ctx, opts, goCmd, im, bins, byRef, m.KubernetesVersion)
		if err != nil {
			return nil, err
		}
		m.SetRoot(im.Ref, root)
	}
	seen := map[string]bool{}
	for i, im := range images {
		m.Actions["image "+im.Ref] = built[i]
		m.Images = append(m.Images, ImageRecord{Ref: im.Ref, Digest: im.Manifest, KindNode: opts.Spec.Images[i].KindNode != nil})
		for _, p := range pkgsByImage[i] {
			if !seen[p.String()] {
				seen[p.String()] = true
				m.Debs = append(m.Debs, p)
			}
		}
	}
	sort.Slice(m.Debs, func(i, j int) bool { return m.Debs[i].Name < m.Debs[j].Name })

	dir, err := writeView(s, m, images)
	if err != nil {
		return nil, err
	}
	return &Result{Dir: dir, Manifest: m}, nil
}

// debianParts is what the Debian roots made: their records (roots,
// artifacts and actions) in a manifest of their own, and the first error.
type debianParts struct {
	m   Manifest
	err error
}

// buildDebianParts builds the images of Debian roots (into their entries
// of images and built) and the artifacts, one at a time: each runs
// mmdebstrap, which shares the .deb cache.
func buildDebianParts(ctx context.Context, opts Options, images []ocibuild.Image, built []bool) debianParts {
	d := debianParts{m: Manifest{Actions: map[string]bool{}}}
	for i := range opts.Spec.Images {
		im := &opts.Spec.Images[i]
		if im.Debian == nil || im.KindNode != nil {
			continue
		}
		var root record.Root
		images[i], root, built[i], d.err = buildDebianImage(ctx, opts, im)
		if d.err != nil {
			return d
		}
		d.m.SetRoot(im.Ref, root)
	}
	for i := range opts.Spec.Artifacts {
		a := &opts.Spec.Artifacts[i]
		var art record.Artifact
		var root record.Root
		var b bool
		art, root, b, d.err = buildArtifact(ctx, opts, a)
		if d.err != nil {
			return d
		}
		d.m.Actions["artifact "+a.Name] = b
		d.m.Artifacts = append(d.m.Artifacts, art)
		d.m.SetRoot(a.Name, root)
	}
	return d
}

// checkKubeadmImages fails when kubeadm would pull an image that no recipe
// produces: the appliance must never need the network.
func checkKubeadmImages(ctx context.Context, kubeadm, version string, images []recipes.Image) error {
	want, err := KubeadmImages(ctx, kubeadm, version)
	if err != nil {
		return err
	}
	have := map[string]bool{}
	for _, im := range images {
		have[im.Ref] = true
	}
	var missing []string
	for _, w := range want {
		if !have[w] {
			missing = append(missing, w)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("kubeadm %s pulls %d images that images/recipes.yaml does not build:\n  %s\nadd them to images (matching `kubeadm config images list --kubernetes-version %s`)",
			version, len(missing), strings.Join(missing, "\n  "), version)
	}
	return nil
}

// KubeadmImages is what `kubeadm config images list` prints for a release.
func KubeadmImages(ctx context.Context, kubeadm, version string) ([]string, error) {
	out, err := command.Output(ctx, command.Options{}, kubeadm, "config", "images", "list", "--kubernetes-version", version)
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(out)), nil
}
