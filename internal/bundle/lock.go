package bundle

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/bootstick/bootstick/internal/atomicfile"
	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/config"
	"github.com/bootstick/bootstick/internal/debs"
	"github.com/bootstick/bootstick/internal/osimage"
	"github.com/bootstick/bootstick/internal/registry"
	"github.com/bootstick/bootstick/internal/toolchain/record"
)

// LockKind is the kind of bundle.lock.
const LockKind = "BundleLock"

// MaxFileSize is the largest file the stick can carry: an ISO 9660 file
// extent is at most 4 GiB - 1 bytes.
const MaxFileSize = 1<<32 - 1

// Sources of locked entries.
const (
	SourceToolchain = "toolchain" // built from source into the cache
	SourceRegistry  = "registry"  // pulled by digest
	SourceURL       = "url"       // downloaded, sha256-verified
	SourceLocal     = "local"     // a file of the build host, hashed at lock time
	SourceApt       = "apt"       // a Debian package from the host's apt lists
)

// Lock is bundle.lock: the bundle resolved to exact versions, the sha256 of
// every file and the digest of every image. A build from a lock downloads
// nothing that is not in it and checks everything it reads against it.
type Lock struct {
	APIVersion   string     `json:"apiVersion"`
	Kind         string     `json:"kind"`
	Bundle       string     `json:"bundle"`
	BundleDigest cas.Digest `json:"bundleDigest"`
	OS           LockedOS   `json:"os"`
	Kubernetes   LockedKube `json:"kubernetes"`
	// Images are every image of the offline registry, sorted by ref.
	Images    []LockedImage  `json:"images"`
	Packages  LockedPackages `json:"packages"`
	Manifests []LockedFile   `json:"manifests"`
	// LeftOut are manifests of manifests.ifImagesPresent that do not ship
	// because the registry lacks images they reference.
	LeftOut []LeftOutManifest `json:"leftOut,omitempty"`
	Files   []LockedFile      `json:"files"`
	// Unresolved names entries that could not be pinned offline (a URL
	// with no sha256, an image with no digest). A build resolves them
	// online first; a --locked build refuses them.
	Unresolved []string `json:"unresolved,omitempty"`
}

// LockedOS is the OS's suite, its mirrors and the named packages'
// versions. The packages are read from the suite and its -updates at
// Mirror, and its -security at SecurityMirror; each package names the
// suite its version came from, and the OS installs exactly that version.
type LockedOS struct {
	Suite            string         `json:"suite"`
	Mirror           string         `json:"mirror,omitempty"`
	SecurityMirror   string         `json:"securityMirror,omitempty"`
	CompressionLevel int            `json:"compressionLevel"`
	Packages         []debs.Package `json:"packages"`
}

// Sources are the suites and mirrors the lock's packages come from.
func (o LockedOS) Sources() debs.Sources {
	return debs.Sources{Suite: o.Suite, Mirror: o.Mirror, SecurityMirror: o.SecurityMirror}
}

// LockedKube is the release and where it came from.
type LockedKube struct {
	Version string                `json:"version"`
	Source  string                `json:"source"`
	Go      string                `json:"go,omitempty"`
	Recipes []record.RecipeRecord `json:"recipes,omitempty"`
	// Binaries are every binary of the release the bundle uses.
	Binaries []LockedFile `json:"binaries"`
	// Roots are the Debian roots the toolchain made images and
	// artifacts of: suite, mirror and the pinned packages' versions.
	Roots map[string]record.Root `json:"roots,omitempty"`
}

// LockedImage is one image of the registry.
type LockedImage struct {
	Ref    string     `json:"ref"`
	Digest cas.Digest `json:"digest,omitempty"`
	Source string     `json:"source"`
}

// LockedPackages are the compute nodes' packages.
type LockedPackages struct {
	Binaries []LockedFile `json:"binaries"`
	Debs     []LockedDeb  `json:"debs"`
}

// LockedDeb is a Debian package shipped in packages/.
type LockedDeb struct {
	debs.Package
	File string `json:"file"`
}

// LockedFile is one file by sha256.
type LockedFile struct {
	Name   string     `json:"name"`
	Dest   string     `json:"dest"` // payload folder, relative to /bundle
	Source string     `json:"source"`
	URL    string     `json:"url,omitempty"`
	Path   string     `json:"path,omitempty"` // relative to the bundle file
	SHA256 cas.Digest `json:"sha256,omitempty"`
	Size   int64      `json:"size,omitempty"`
	// Zstd, when set, is the copy the payload carries: the file
	// compressed with zstd, named with .zst (a compute node's binary,
	// which the host decompresses). SHA256 and Size stay the file's own,
	// which the host checks once it has decompressed it.
	Zstd *Compressed `json:"zstd,omitempty"`
}

// Compressed is a file's compressed copy: its digest and size.
type Compressed struct {
	SHA256 cas.Digest `json:"sha256"`
	Size   int64      `json:"size"`
}

// PayloadPath is where the file lives under /bundle.
func (f LockedFile) PayloadPath() string {
	if f.Zstd != nil {
		return f.Dest + "/" + f.Name + ".zst"
	}
	return f.Dest + "/" + f.Name
}

// PayloadDigest is the digest of what lives at PayloadPath.
func (f LockedFile) PayloadDigest() cas.Digest {
	if f.Zstd != nil {
		return f.Zstd.SHA256
	}
	return f.SHA256
}

// PayloadSize is the size of what lives at PayloadPath.
func (f LockedFile) PayloadSize() int64 {
	if f.Zstd != nil {
		return f.Zstd.Size
	}
	return f.Size
}

// DebFile is the .deb's name in packages/ (Debian drops the epoch).
func DebFile(p debs.Package) string {
	v := p.Version
	if i := strings.Index(v, ":"); i >= 0 {
		v = v[i+1:]
	}
	return p.Name + "_" + v + "_" + p.Arch + ".deb"
}

// PayloadFiles lists every file of the payload the lock pins, by its path
// under /bundle, with its digest (registry blobs excluded).
func (l *Lock) PayloadFiles() map[string]cas.Digest {
	out := map[string]cas.Digest{}
	for _, f := range l.Manifests {
		out[f.PayloadPath()] = f.SHA256
	}
	for _, f := range l.Files {
		out[f.PayloadPath()] = f.SHA256
	}
	for _, f := range l.Packages.Binaries {
		out[f.PayloadPath()] = f.PayloadDigest()
	}
	for _, d := range l.Packages.Debs {
		out["packages/"+d.File] = d.SHA256
	}
	return out
}

// Resolver is what Resolve needs from the world.
type Resolver struct {
	// Toolchain builds (or reads from the cache) the release from source.
	Toolchain func(ctx context.Context, recipes string) (*record.Manifest, error)
	// Debs resolves Debian package names to versions and sha256.
	Debs func(ctx context.Context, names []string) ([]debs.Package, error)
	// OSPackages are installed in every OS besides the bundle's own
	// (rootfs.DefaultPackages); the lock pins their versions too.
	OSPackages []string
	// Mirror is the mirror of a suite (the OS's, and its -security's)
	// when the bundle gives none (the host's).
	Mirror func(suite string) (string, error)
	// Download fetches a URL with no pinned sha256 and returns its digest
	// and size; nil means offline: the entry stays unresolved.
	Download func(ctx context.Context, url string) (cas.Digest, int64, error)
	// ImageDigest finds an image's digest in its registry; nil means
	// offline.
	ImageDigest func(ctx context.Context, ref string) (cas.Digest, error)
	// Compress makes the zstd copy the payload carries of a compute
	// node's binary (a pinned file: it may have to fetch it first); nil:
	// the payload carries the binaries as they are.
	Compress func(ctx context.Context, f LockedFile) (Compressed, error)
}

func sortFiles(fs []LockedFile) {
	sort.Slice(fs, func(i, j int) bool { return fs[i].PayloadPath() < fs[j].PayloadPath() })
}

func debPackages(ds []LockedDeb) []debs.Package {
	out := make([]debs.Package, len(ds))
	for i, d := range ds {
		out[i] = d.Package
	}
	return out
}

// resolveDebs keeps the previous lock's version of each package and asks
// apt for the rest.
func resolveDebs(ctx context.Context, r Resolver, names []string, prev []debs.Package) ([]debs.Package, error) {
	locked := map[string]debs.Package{}
	for _, p := range prev {
		locked[p.Name] = p
	}
	var ask []string
	for _, n := range names {
		if _, ok := locked[n]; !ok {
			ask = append(ask, n)
		}
	}
	got := map[string]debs.Package{}
	if len(ask) > 0 {
		pkgs, err := r.Debs(ctx, ask)
		if err != nil {
			return nil, err
		}
		for _, p := range pkgs {
			got[p.Name] = p
		}
	}
	out := make([]debs.Package, 0, len(names))
	for _, n := range names {
		if p, ok := locked[n]; ok {
			out = append(out, p)
		} else {
			out = append(out, got[n])
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func resolveFile(ctx context.Context, b *Bundle, r Resolver, f File, prev []LockedFile, where string, unresolved *[]string) (LockedFile, error) {
	lf := LockedFile{Name: f.Name, Dest: f.Dest, URL: f.URL, Path: f.Path}
	if f.Path != "" {
		lf.Source = SourceLocal
		p := b.Path(f.Path)
		fi, err := os.Stat(p)
		if err != nil {
			return lf, fmt.Errorf("bundle %s: %s.path: %w", b.File, where, err)
		}
		if fi.Size() > MaxFileSize {
			return lf, &TooLargeError{Where: where, File: p, Size: fi.Size()}
		}
		d, n, err := cas.HashFile(p)
		if err != nil {
			return lf, fmt.Errorf("bundle %s: %s: %w", b.File, where, err)
		}
		if f.SHA256 != "" && d.Hex() != f.SHA256 {
			return lf, fmt.Errorf("bundle %s: %s: %s: %w", b.File, where, p, &cas.MismatchError{Want: cas.Digest("sha256:" + f.SHA256), Got: d})
		}
		lf.SHA256, lf.Size = d, n
		return lf, nil
	}
	lf.Source = SourceURL
	if f.SHA256 != "" {
		lf.SHA256 = cas.Digest("sha256:" + f.SHA256)
		for _, p := range prev {
			if p.URL == f.URL && p.SHA256 == lf.SHA256 {
				lf.Size = p.Size
			}
		}
		return lf, nil
	}
	for _, p := range prev {
		if p.URL == f.URL && p.SHA256 != "" {
			lf.SHA256, lf.Size = p.SHA256, p.Size
			return lf, nil
		}
	}
	if r.Download == nil {
		*unresolved = append(*unresolved, where+".sha256: "+f.URL)
		return lf, nil
	}
	d, n, err := r.Download(ctx, f.URL)
	if err != nil {
		return lf, fmt.Errorf("bundle %s: %s: %w", b.File, where, err)
	}
	lf.SHA256, lf.Size = d, n
	return lf, nil
}

func resolveImage(ctx context.Context, r Resolver, im Image, prev []LockedImage, where string, unresolved *[]string) (LockedImage, error) {
	li := LockedImage{Ref: im.Ref, Digest: cas.Digest(im.Digest), Source: SourceRegistry}
	if li.Digest != "" {
		return li, nil
	}
	for _, p := range prev {
		if p.Ref == im.Ref && p.Digest != "" {
			li.Digest = p.Digest
			return li, nil
		}
	}
	if r.ImageDigest == nil {
		*unresolved = append(*unresolved, where+".digest: "+im.Ref)
		return li, nil
	}
	d, err := r.ImageDigest(ctx, im.Ref)
	if err != nil {
		return li, fmt.Errorf("%s: %w", where, err)
	}
	li.Digest = d
	return li, nil
}

// TooLargeError is a file the ISO cannot hold.
type TooLargeError struct {
	Where, File string
	Size        int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("%s: %s is %.2f GiB; an ISO 9660 file holds at most 4 GiB - 1 byte: compress it or split it", e.Where, e.File, float64(e.Size)/(1<<30))
}

// Marshal is the lock's file content: indented JSON, one trailing newline.
func (l *Lock) Marshal() []byte {
	b, _ := json.MarshalIndent(l, "", "  ")
	return append(b, '\n')
}

// ReadLock reads a lock file; (nil, nil) when there is none.
func ReadLock(path string) (*Lock, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading lock: %w", err)
	}
	return ParseLock(path, data)
}

// ParseLock decodes lock data strictly.
func ParseLock(path string, data []byte) (*Lock, error) {
	var l Lock
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return nil, fmt.Errorf("reading lock %s: %w (delete it to resolve the bundle again)", path, err)
	}
	if l.APIVersion != config.APIVersion || l.Kind != LockKind {
		return nil, fmt.Errorf("reading lock %s: apiVersion %q kind %q, want %s %s", path, l.APIVersion, l.Kind, config.APIVersion, LockKind)
	}
	return &l, nil
}

// WriteLock writes the lock atomically.
func WriteLock(path string, l *Lock) error {
	return atomicfile.Write(path, l.Marshal(), 0o644)
}

// LockPath is the default lock of a bundle file: NAME.lock beside it.
func LockPath(bundleFile string) string {
	return strings.TrimSuffix(bundleFile, filepath.Ext(bundleFile)) + ".lock"
}

// Diff lists what differs between two locks, one line per entry; empty
// when they pin the same things.
func Diff(old, new *Lock) []string {
	var out []string
	if old.BundleDigest != new.BundleDigest {
		out = append(out, fmt.Sprintf("the bundle file changed (%s, locked %s)", short(new.BundleDigest), short(old.BundleDigest)))
	}
	flat := func(l *Lock) map[string]string {
		m := map[string]string{
			"os.suite": l.OS.Suite, "os.mirror": l.OS.Mirror, "os.securityMirror": l.OS.SecurityMirror,
			"kubernetes.version": l.Kubernetes.Version, "kubernetes.go": l.Kubernetes.Go,
		}
		for _, p := range l.OS.Packages {
			m["os.packages "+p.Name] = p.Version + " " + string(p.SHA256)
		}
		for _, r := range l.Kubernetes.Recipes {
			m["kubernetes.recipes "+r.Name] = r.Source
		}
		for _, f := range l.Kubernetes.Binaries {
			m["kubernetes.binaries "+f.Name] = string(f.SHA256)
		}
		for _, im := range l.Images {
			m["image "+im.Ref] = string(im.Digest)
		}
		for path, d := range l.PayloadFiles() {
			m["file "+path] = string(d)
		}
		return m
	}
	a, b := flat(old), flat(new)
	var keys []string
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		av, aok := a[k]
		bv, bok := b[k]
		switch {
		case !aok:
			out = append(out, fmt.Sprintf("%s: new (%s)", k, bv))
		case !bok:
			out = append(out, fmt.Sprintf("%s: gone (locked %s)", k, av))
		case av != bv:
			out = append(out, fmt.Sprintf("%s: %s, locked %s", k, bv, av))
		}
	}
	return out
}

func short(d cas.Digest) string {
	if len(d) > 19 {
		return string(d[:19])
	}
	return string(d)
}

// ImageRefs returns the lock's image references, normalized the way the
// offline registry names them.
func (l *Lock) ImageRefs() map[string]LockedImage {
	out := map[string]LockedImage{}
	for _, im := range l.Images {
		if r, err := registry.ParseRef(im.Ref); err == nil {
			out[r.String()] = im
		}
	}
	return out
}

// BundledImages are the lock's compute OS images (its .qcow2, .raw and
// .img files under os-images) as a site names them: by base name.
func (l *Lock) BundledImages() []osimage.Image {
	out := []osimage.Image{}
	for _, f := range l.Files {
		if f.Dest != "os-images" {
			continue
		}
		if im, ok := osimage.FromFile(f.Name, f.SHA256.Hex()); ok {
			out = append(out, im)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Plugins are the KUD plugins the bundle serves, by name, with each
// one's image: flannel, when it carries flannel's CNI plugin and image.
func (l *Lock) Plugins() map[string]string {
	out := map[string]string{}
	hasCNI := false
	for _, b := range l.Packages.Binaries {
		hasCNI = hasCNI || b.Name == "flannel"
	}
	for _, im := range l.Images {
		if r, err := registry.ParseRef(im.Ref); err == nil && r.Repository == "flannel/flannel" && hasCNI {
			out["flannel"] = r.String()
		}
	}
	return out
}

// PluginNames are Plugins' names, sorted.
func (l *Lock) PluginNames() []string {
	names := []string{}
	for n := range l.Plugins() {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
