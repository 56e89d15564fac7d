// Package toolchain builds what images/recipes.yaml names, from pinned
// sources, into the content-addressed cache: the Go binaries (Kubernetes,
// etcd, CoreDNS, pause) and the OCI images kubeadm pulls for the pinned
// release.
//
// Each recipe and each image is one cached action, keyed by the hash of
// its inputs: a rebuild with nothing changed does no work, and a changed
// pin rebuilds only what depends on it. The result is a view folder,
//
//	<cache>/toolchain/current -> views/<hash>/
//	    bin/<binary>     hard links into the cache
//	    oci/             an OCI image layout of every image
//	    toolchain.json   what was built, from what, with digests
//
// swapped into place atomically, so readers never see a half-built view.
package toolchain

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/bootstick/bootstick/internal/logctx"
	"github.com/bootstick/bootstick/internal/rootfs"

	"github.com/bootstick/bootstick/internal/command"

	"github.com/bootstick/bootstick/internal/preflight"
	"github.com/bootstick/bootstick/internal/progress"
	"github.com/bootstick/bootstick/internal/toolchain/record"

	"golang.org/x/sync/errgroup"

	"github.com/bootstick/bootstick/internal/atomicfile"
	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/debs"
	"github.com/bootstick/bootstick/internal/gobuild"
	"github.com/bootstick/bootstick/internal/ocibuild"
	"github.com/bootstick/bootstick/internal/recipes"
)

// Options say what to build and where.
type Options struct {
	Spec  *recipes.Spec
	Store *cas.Store
	// Go is the go command; "go" when empty.
	Go string
	// Epoch is the time stamped into binaries and images
	// (SOURCE_DATE_EPOCH); the Unix epoch when zero.
	Epoch time.Time
	// Progress shows each recipe's compile (nil: none).
	Progress progress.Progress
	// Mirror gives the Debian mirror of a suite for the Debian roots, and
	// of its -security suite (the security archive); the build host's apt
	// configuration when nil (rootfs.HostMirror).
	Mirror func(suite string) (string, error)
}

func (o Options) mirror(suite string) (string, error) {
	if o.Mirror != nil {
		return o.Mirror(suite)
	}
	return rootfs.HostMirror("/", suite)
}

// The toolchain's records live in package record, which the lock reads
// without linking the builder.
type (
	Manifest     = record.Manifest
	Binary       = record.Binary
	RecipeRecord = record.RecipeRecord
	ImageRecord  = record.ImageRecord
)

// Result is a built toolchain view.
type Result struct {
	Dir      string
	Manifest Manifest
}

// BinDir is where the binaries are.
func (r *Result) BinDir() string { return filepath.Join(r.Dir, "bin") }

// Bin is the path of one binary.
func (r *Result) Bin(name string) string { return filepath.Join(r.Dir, "bin", name) }

// File is the path of one artifact's file.
func (r *Result) File(name string) string { return filepath.Join(r.Dir, "files", name) }

// Layout is the OCI image layout.
func (r *Result) Layout() string { return filepath.Join(r.Dir, "oci") }

// Open reads the current toolchain view of a cache folder.
func Open(cacheDir string) (*Result, error) {
	dir, err := filepath.EvalSymlinks(filepath.Join(cacheDir, "toolchain", "current"))
	if err != nil {
		return nil, fmt.Errorf("no toolchain in cache %s: run `make toolchain` first (%w)", cacheDir, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "toolchain.json"))
	if err != nil {
		return nil, fmt.Errorf("toolchain %s is incomplete: run `make toolchain` again (%w)", dir, err)
	}
	r := &Result{Dir: dir}
	if err := json.Unmarshal(b, &r.Manifest); err != nil {
		return nil, fmt.Errorf("reading %s/toolchain.json: %w", dir, err)
	}
	return r, nil
}

// recipeRecord is the action record of one Go recipe.
type recipeRecord struct {
	Binaries map[string]cas.Digest `json:"binaries"`
}

func (r *recipeRecord) Blobs() []cas.Digest {
	var out []cas.Digest
	for _, d := range r.Binaries {
		out = append(out, d)
	}
	return out
}

type imageRecord struct{ ocibuild.Image }

func (r *imageRecord) Blobs() []cas.Digest { return r.Image.Blobs() }

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

// buildRecipe returns the cached binaries of a recipe, building them first
// when its inputs changed.
func buildRecipe(ctx context.Context, opts Options, goCmd, goVersion string, r *recipes.GoRecipe, label string) (*recipeRecord, bool, error) {
	s := opts.Store
	inputs := map[string]any{
		"action": "gobuild/v1", "recipe": r, "go": goVersion,
		"flags": gobuild.Flags, "env": gobuild.RecipeEnv(r), "epoch": opts.Epoch.Unix(),
	}
	if r.Local != "" {
		h, err := hashLocal(filepath.Join(opts.Spec.Dir, r.Local))
		if err != nil {
			return nil, false, fmt.Errorf("recipe %s: %w", r.Name, err)
		}
		inputs["source"] = h
		// Every package of this repository the binaries import, wherever
		// it lives: a change to any of them rebuilds the recipe.
		var pkgs []string
		for _, p := range r.Packages {
			pkgs = append(pkgs, p.Path)
		}
		deps, err := hashRepoDeps(ctx, goCmd, filepath.Join(opts.Spec.Dir, r.Local), pkgs)
		if err != nil {
			return nil, false, fmt.Errorf("recipe %s: %w", r.Name, err)
		}
		inputs["deps"] = deps
	}
	for old, repl := range r.Replace {
		if filepath.IsAbs(repl) || strings.HasPrefix(repl, ".") {
			h, err := hashLocal(repl)
			if err != nil {
				return nil, false, fmt.Errorf("recipe %s: replace %s: %w", r.Name, old, err)
			}
			inputs["replace:"+old] = h
		}
	}
	key, err := cas.Key(inputs)
	if err != nil {
		return nil, false, err
	}
	rec := &recipeRecord{}
	if ok, err := s.GetAction(key, rec); err != nil {
		return nil, false, err
	} else if ok {
		logctx.From(ctx).Info("recipe cached", "recipe", r.Name, "source", r.ModVersion())
		return rec, false, nil
	}

	work, err := s.TempDir("recipe-" + r.Name + "-")
	if err != nil {
		return nil, false, err
	}
	defer os.RemoveAll(work)
	out := filepath.Join(work, "out")
	mod := filepath.Join(work, "mod")
	for _, d := range []string{out, mod} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return nil, false, err
		}
	}
	start := time.Now()
	logctx.From(ctx).Info("recipe building", "recipe", r.Name, "source", r.ModVersion(), "binaries", strings.Join(r.BinaryNames(), ","))
	repo := opts.Spec.Dir
	if err := gobuild.Build(ctx, r, mod, out, gobuild.Options{Go: goCmd, Epoch: opts.Epoch, RepoDir: repo, Progress: opts.Progress, Label: label}); err != nil {
		return nil, false, err
	}
	rec.Binaries = map[string]cas.Digest{}
	for _, name := range r.BinaryNames() {
		d, _, err := s.PutFile(filepath.Join(out, name))
		if err != nil {
			return nil, false, fmt.Errorf("recipe %s: %w", r.Name, err)
		}
		if err := os.Chmod(s.BlobPath(d), 0o555); err != nil {
			return nil, false, fmt.Errorf("recipe %s: %w", r.Name, err)
		}
		rec.Binaries[name] = d
	}
	if err := s.PutAction(key, rec); err != nil {
		return nil, false, fmt.Errorf("recipe %s: %w", r.Name, err)
	}
	logctx.From(ctx).Info("recipe built", "recipe", r.Name, "source", r.ModVersion(), "took", time.Since(start).Round(time.Second))
	return rec, true, nil
}

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

// writeView assembles bin/, oci/ and toolchain.json in a new folder named by
// their hash, then points toolchain/current at it.
func writeView(s *cas.Store, m Manifest, images []ocibuild.Image) (string, error) {
	mj, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return "", err
	}
	key, err := cas.Key(string(mj))
	if err != nil {
		return "", err
	}
	top := filepath.Join(s.Root, "toolchain")
	views := filepath.Join(top, "views")
	if err := os.MkdirAll(views, 0o755); err != nil {
		return "", fmt.Errorf("writing toolchain view: %w", err)
	}
	final := filepath.Join(views, key[:16])
	if _, err := os.Stat(filepath.Join(final, "toolchain.json")); err != nil {
		os.RemoveAll(final)
		tmp, err := os.MkdirTemp(views, ".tmp-")
		if err != nil {
			return "", fmt.Errorf("writing toolchain view: %w", err)
		}
		defer os.RemoveAll(tmp)
		if err := os.Mkdir(filepath.Join(tmp, "bin"), 0o755); err != nil {
			return "", err
		}
		for _, b := range m.Binaries {
			if err := s.Link(b.Digest, filepath.Join(tmp, "bin", b.Name)); err != nil {
				return "", fmt.Errorf("writing toolchain view: %w", err)
			}
		}
		if err := ocibuild.WriteLayout(s, filepath.Join(tmp, "oci"), images); err != nil {
			return "", err
		}
		if err := os.Mkdir(filepath.Join(tmp, "files"), 0o755); err != nil {
			return "", err
		}
		for _, a := range m.Artifacts {
			for _, f := range a.Files {
				if err := s.Link(f.Digest, filepath.Join(tmp, "files", f.Name)); err != nil {
					return "", fmt.Errorf("writing toolchain view: %w", err)
				}
			}
		}
		if err := atomicfile.Write(filepath.Join(tmp, "toolchain.json"), append(mj, '\n'), 0o644); err != nil {
			return "", err
		}
		if err := os.Rename(tmp, final); err != nil {
			return "", fmt.Errorf("writing toolchain view: %w", err)
		}
	}
	// Swap the current link atomically, then drop older views.
	link := filepath.Join(top, "current")
	tmpLink := link + ".tmp"
	os.Remove(tmpLink)
	if err := os.Symlink(filepath.Join("views", key[:16]), tmpLink); err != nil {
		return "", fmt.Errorf("writing toolchain view: %w", err)
	}
	if err := os.Rename(tmpLink, link); err != nil {
		return "", fmt.Errorf("writing toolchain view: %w", err)
	}
	entries, _ := os.ReadDir(views)
	for _, e := range entries {
		if e.Name() != key[:16] {
			os.RemoveAll(filepath.Join(views, e.Name()))
		}
	}
	return final, nil
}
