// Package bundle is the Bundle kind (bundle/*.yaml): what goes on a
// bootstick — the Debian OS, the Kubernetes release and its images, the
// manifests, the binary packages for compute nodes, and optional files and
// images — and its lock (bundle.lock), which pins every one of them by
// version, sha256 or image digest.
package bundle

import (
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/config"
	"github.com/bootstick/bootstick/internal/debs"
	"github.com/bootstick/bootstick/internal/registry"
)

// Kind is the YAML kind of a bundle file.
const Kind = "Bundle"

// Bundle is one bundle file.
type Bundle struct {
	config.TypeMeta `yaml:",inline"`
	// Name labels the bundle (and the ISO's volume, upper-cased).
	Name       string     `yaml:"name"`
	OS         OS         `yaml:"os"`
	Kubernetes Kubernetes `yaml:"kubernetes"`
	Manifests  Manifests  `yaml:"manifests"`
	Packages   Packages   `yaml:"packages"`
	// Files are fetched by URL (or taken from a local path) and shipped.
	Files []File `yaml:"files,omitempty"`
	// Images are extra container images pulled by reference.
	Images []Image `yaml:"images,omitempty"`

	// File is the path the bundle was read from; Dir its folder, which
	// relative paths in it start from.
	File string `yaml:"-"`
	Dir  string `yaml:"-"`
	// Digest is the sha256 of the file's bytes: the lock records it.
	Digest cas.Digest `yaml:"-"`
}

// OS is the Debian live system. Its packages come from the suite and
// its -updates (at Mirror) and -security (at SecurityMirror), as on an
// installed Debian system.
type OS struct {
	Suite string `yaml:"suite"`
	// Mirror is the Debian mirror; empty takes it from the build host's
	// apt configuration.
	Mirror string `yaml:"mirror,omitempty"`
	// SecurityMirror is the Debian security archive (it serves
	// SUITE-security); empty takes it from the build host's apt
	// configuration: its source of SUITE-security, else of its own
	// release's -security.
	SecurityMirror string `yaml:"securityMirror,omitempty"`
	// Packages are installed besides the ones every stick needs.
	Packages []string `yaml:"packages,omitempty"`
	// CompressionLevel is the squashfs zstd level; default 3.
	CompressionLevel int `yaml:"compressionLevel,omitempty"`
}

// Kubernetes says where the release's binaries and images come from:
// either built from source by the toolchain (Recipes), or downloaded from
// upstream release URLs and registries (Binaries and Images).
type Kubernetes struct {
	Version string `yaml:"version"`
	// Recipes is the toolchain's recipes file, relative to the bundle.
	Recipes string `yaml:"recipes,omitempty"`
	// Binaries are release binaries by URL (a sha256 pins each).
	Binaries []File `yaml:"binaries,omitempty"`
	// Images are the images kubeadm pulls, by reference and digest.
	Images []Image `yaml:"images,omitempty"`
}

// FromToolchain reports whether the release is built from source.
func (k Kubernetes) FromToolchain() bool { return k.Recipes != "" }

// Manifests are the Kubernetes manifests firstboot applies, in name order.
type Manifests struct {
	// Dir is a folder of *.yaml files, relative to the bundle.
	Dir string `yaml:"dir"`
	// IfImagesPresent names files of Dir that ship only when the
	// registry holds every image they reference (by name and digest);
	// otherwise they are left out, and the lock and the build log say which
	// image is missing. Every other manifest must find all its images (the
	// completeness check), and no manifest may pin another digest than the
	// registry's image of the same repository has.
	IfImagesPresent []string `yaml:"ifImagesPresent,omitempty"`
}

// Packages are what compute nodes install: binaries of the Kubernetes
// release, and Debian packages.
type Packages struct {
	Binaries []string `yaml:"binaries,omitempty"`
	Debs     []string `yaml:"debs,omitempty"`
}

// File is one file by URL (or local path) and sha256.
type File struct {
	// Name is the file's name on the stick; default the last part of the
	// URL or path.
	Name   string `yaml:"name,omitempty"`
	URL    string `yaml:"url,omitempty"`
	Path   string `yaml:"path,omitempty"`
	SHA256 string `yaml:"sha256,omitempty"`
	// Dest is the payload folder: os-images (the default), packages or
	// files.
	Dest string `yaml:"dest,omitempty"`
}

// Image is a container image by reference, pinned by digest.
type Image struct {
	Ref    string `yaml:"ref"`
	Digest string `yaml:"digest,omitempty"`
}

// Payload folders a file can go to.
var Dests = []string{"os-images", "packages", "files"}

// Load reads, defaults and validates a bundle file.
func Load(file string) (*Bundle, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading bundle: %w", err)
	}
	return Parse(file, data)
}

// Parse is Load for data already read from file.
func Parse(file string, data []byte) (*Bundle, error) {
	var b Bundle
	doc, err := config.Decode(file, data, Kind, &b)
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(file)
	if err != nil {
		return nil, fmt.Errorf("reading bundle %s: %w", file, err)
	}
	b.File, b.Dir = abs, filepath.Dir(abs)
	b.Digest = cas.DigestOf(data)
	b.defaults()
	if err := doc.Problems(b.Validate()); err != nil {
		return nil, err
	}
	return &b, nil
}

func (b *Bundle) defaults() {
	if b.Name == "" {
		b.Name = strings.TrimSuffix(filepath.Base(b.File), filepath.Ext(b.File))
	}
	if b.OS.Suite == "" {
		b.OS.Suite = "trixie"
	}
	if b.OS.CompressionLevel == 0 {
		b.OS.CompressionLevel = 3
	}
	for i := range b.Files {
		f := &b.Files[i]
		if f.Dest == "" {
			f.Dest = "os-images"
		}
		if f.Name == "" {
			f.Name = defaultName(*f)
		}
	}
	for i := range b.Kubernetes.Binaries {
		f := &b.Kubernetes.Binaries[i]
		f.Dest = "packages"
		if f.Name == "" {
			f.Name = defaultName(*f)
		}
	}
}

func defaultName(f File) string {
	if f.URL != "" {
		if u, err := url.Parse(f.URL); err == nil {
			return path.Base(u.Path)
		}
	}
	if f.Path != "" {
		return filepath.Base(f.Path)
	}
	return ""
}

// Path resolves a path of the bundle file against its folder.
func (b *Bundle) Path(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(b.Dir, p)
}

var (
	nameRE    = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)
	debRE     = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+$`)
	versionRE = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+$`)
	fileRE    = regexp.MustCompile(`^[A-Za-z0-9._+-]+$`)
	binaryRE  = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)
)

// mirrorURL reports whether m is an http, https or file URL.
func mirrorURL(m string) bool {
	u, err := url.Parse(m)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https" || u.Scheme == "file") && (u.Host != "" || u.Scheme == "file")
}

// Sources are the OS's suite and mirrors: those the bundle gives, the
// others from mirror (the mirror of a suite, normally the build host's
// apt configuration); a nil mirror leaves them empty.
func (o OS) Sources(mirror func(suite string) (string, error)) (debs.Sources, error) {
	src := debs.Sources{Suite: o.Suite, Mirror: o.Mirror, SecurityMirror: o.SecurityMirror}
	if mirror == nil {
		return src, nil
	}
	return src.Complete(mirror)
}

// Validate reports every problem with its field path.
func (b *Bundle) Validate() field.ErrorList {
	var errs field.ErrorList
	if !nameRE.MatchString(b.Name) || len(b.Name) > 24 {
		errs = append(errs, field.Invalid(field.NewPath("name"), b.Name, "use up to 24 lower-case letters, digits and '-'"))
	}

	op := field.NewPath("os")
	if !nameRE.MatchString(b.OS.Suite) {
		errs = append(errs, field.Invalid(op.Child("suite"), b.OS.Suite, "a Debian suite such as bookworm"))
	}
	if b.OS.Mirror != "" && !mirrorURL(b.OS.Mirror) {
		errs = append(errs, field.Invalid(op.Child("mirror"), b.OS.Mirror, "an http, https or file URL; or leave it out to use the build host's apt mirror"))
	}
	switch {
	case b.OS.SecurityMirror != "" && !debs.HasUpdates(b.OS.Suite):
		errs = append(errs, field.Forbidden(op.Child("securityMirror"), fmt.Sprintf("suite %s has no -security suite: leave it out", b.OS.Suite)))
	case b.OS.SecurityMirror != "" && !mirrorURL(b.OS.SecurityMirror):
		errs = append(errs, field.Invalid(op.Child("securityMirror"), b.OS.SecurityMirror, "an http, https or file URL; or leave it out to use the build host's apt source of the security suite"))
	}
	errs = append(errs, debNames(op.Child("packages"), b.OS.Packages)...)
	if b.OS.CompressionLevel < 1 || b.OS.CompressionLevel > 22 {
		errs = append(errs, field.Invalid(op.Child("compressionLevel"), b.OS.CompressionLevel, "a zstd level from 1 to 22"))
	}

	kp := field.NewPath("kubernetes")
	k := b.Kubernetes
	if !versionRE.MatchString(k.Version) {
		errs = append(errs, field.Invalid(kp.Child("version"), k.Version, "a release such as v1.34.4"))
	}
	switch {
	case k.Recipes == "" && len(k.Binaries) == 0:
		errs = append(errs, field.Required(kp.Child("recipes"), "give recipes (build from source with the toolchain) or binaries and images (upstream release)"))
	case k.Recipes != "" && (len(k.Binaries) > 0 || len(k.Images) > 0):
		errs = append(errs, field.Forbidden(kp.Child("binaries"), "give recipes or binaries and images, not both"))
	case k.Recipes != "":
		if _, err := os.Stat(b.Path(k.Recipes)); err != nil {
			errs = append(errs, field.NotFound(kp.Child("recipes"), k.Recipes))
		}
	default:
		if len(k.Images) == 0 {
			errs = append(errs, field.Required(kp.Child("images"), "the images kubeadm pulls for this release"))
		}
	}
	binNames := map[string]bool{}
	for i, f := range k.Binaries {
		p := kp.Child("binaries").Index(i)
		errs = append(errs, validateFile(b, p, f, false)...)
		if f.URL == "" {
			errs = append(errs, field.Required(p.Child("url"), "release binaries come by URL"))
		}
		binNames[f.Name] = true
	}
	errs = append(errs, validateImages(kp.Child("images"), k.Images)...)

	mp := field.NewPath("manifests", "dir")
	if b.Manifests.Dir == "" {
		errs = append(errs, field.Required(mp, "the folder of manifests firstboot applies"))
	} else if fi, err := os.Stat(b.Path(b.Manifests.Dir)); err != nil || !fi.IsDir() {
		errs = append(errs, field.NotFound(mp, b.Manifests.Dir))
	} else {
		op := field.NewPath("manifests", "ifImagesPresent")
		seenM := map[string]bool{}
		for i, n := range b.Manifests.IfImagesPresent {
			switch {
			case !fileRE.MatchString(n) || !(strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml")):
				errs = append(errs, field.Invalid(op.Index(i), n, "the name of a .yaml file in manifests.dir"))
			case seenM[n]:
				errs = append(errs, field.Duplicate(op.Index(i), n))
			default:
				if fi, err := os.Stat(filepath.Join(b.Path(b.Manifests.Dir), n)); err != nil || !fi.Mode().IsRegular() {
					errs = append(errs, field.NotFound(op.Index(i), n+" (not in manifests.dir "+b.Manifests.Dir+")"))
				}
			}
			seenM[n] = true
		}
	}

	pp := field.NewPath("packages")
	seen := map[string]bool{}
	for i, n := range b.Packages.Binaries {
		p := pp.Child("binaries").Index(i)
		switch {
		case !binaryRE.MatchString(n):
			errs = append(errs, field.Invalid(p, n, "a binary name such as kubeadm"))
		case seen[n]:
			errs = append(errs, field.Duplicate(p, n))
		case !k.FromToolchain() && len(k.Binaries) > 0 && !binNames[n]:
			errs = append(errs, field.NotFound(p, n+" (not among kubernetes.binaries)"))
		}
		seen[n] = true
	}
	errs = append(errs, debNames(pp.Child("debs"), b.Packages.Debs)...)

	names := map[string]bool{}
	for i, f := range b.Files {
		p := field.NewPath("files").Index(i)
		errs = append(errs, validateFile(b, p, f, true)...)
		key := f.Dest + "/" + f.Name
		if names[key] {
			errs = append(errs, field.Duplicate(p.Child("name"), key))
		}
		names[key] = true
	}
	errs = append(errs, validateImages(field.NewPath("images"), b.Images)...)
	return errs
}

func debNames(p *field.Path, names []string) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]bool{}
	for i, n := range names {
		switch {
		case !debRE.MatchString(n):
			errs = append(errs, field.Invalid(p.Index(i), n, "a Debian package name"))
		case seen[n]:
			errs = append(errs, field.Duplicate(p.Index(i), n))
		}
		seen[n] = true
	}
	return errs
}

func validateFile(b *Bundle, p *field.Path, f File, anyDest bool) field.ErrorList {
	var errs field.ErrorList
	switch {
	case f.URL == "" && f.Path == "":
		errs = append(errs, field.Required(p.Child("url"), "give url (with sha256) or path"))
	case f.URL != "" && f.Path != "":
		errs = append(errs, field.Forbidden(p.Child("path"), "give url or path, not both"))
	case f.URL != "":
		u, err := url.Parse(f.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, field.Invalid(p.Child("url"), f.URL, "an http or https URL"))
		}
	case f.Path != "":
		if fi, err := os.Stat(b.Path(f.Path)); err != nil || !fi.Mode().IsRegular() {
			errs = append(errs, field.NotFound(p.Child("path"), f.Path))
		}
	}
	if f.SHA256 != "" {
		if _, err := cas.ParseDigest("sha256:" + f.SHA256); err != nil || strings.ToLower(f.SHA256) != f.SHA256 {
			errs = append(errs, field.Invalid(p.Child("sha256"), f.SHA256, "64 lower-case hex digits"))
		}
	}
	if !fileRE.MatchString(f.Name) || f.Name == "." || f.Name == ".." {
		errs = append(errs, field.Invalid(p.Child("name"), f.Name, "a file name of letters, digits, '.', '_', '+' and '-'"))
	}
	if anyDest {
		ok := false
		for _, d := range Dests {
			ok = ok || d == f.Dest
		}
		if !ok {
			errs = append(errs, field.NotSupported(p.Child("dest"), f.Dest, Dests))
		}
	}
	return errs
}

func validateImages(p *field.Path, images []Image) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]bool{}
	for i, im := range images {
		ip := p.Index(i)
		r, err := registry.ParseRef(im.Ref)
		switch {
		case im.Ref == "":
			errs = append(errs, field.Required(ip.Child("ref"), ""))
		case err != nil || strings.Contains(im.Ref, "@"):
			errs = append(errs, field.Invalid(ip.Child("ref"), im.Ref, "an image reference with a tag, such as REGISTRY/NAME:TAG (pin the digest in digest:)"))
		case seen[r.String()]:
			errs = append(errs, field.Duplicate(ip.Child("ref"), im.Ref))
		}
		if err == nil {
			seen[r.String()] = true
		}
		if im.Digest != "" {
			if _, err := cas.ParseDigest(im.Digest); err != nil {
				errs = append(errs, field.Invalid(ip.Child("digest"), im.Digest, "sha256:<64 hex digits>"))
			}
		}
	}
	return errs
}
