// Package recipes is the spec of images/recipes.yaml: the Go binaries and the
// OCI images the toolchain builds from pinned sources.
package recipes

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"text/template"

	"github.com/google/go-containerregistry/pkg/name"
	"go.yaml.in/yaml/v3"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/bootstick/bootstick/internal/config"
	"github.com/bootstick/bootstick/internal/debroot"
)

// Kind is the YAML kind of a recipes file.
const Kind = "Recipes"

// Spec is images/recipes.yaml: what the toolchain builds.
type Spec struct {
	config.TypeMeta `yaml:",inline"`
	Binaries        []GoRecipe `yaml:"binaries"`
	Images          []Image    `yaml:"images"`
	// Artifacts are files made from Debian roots: the deploy ramdisk and
	// the compute OS images, shipped under /bundle/os-images.
	Artifacts []Artifact `yaml:"artifacts,omitempty"`

	// Dir is the folder the file was read from; local recipes are relative
	// to it.
	Dir string `yaml:"-"`
}

// GoRecipe builds binaries from Go packages: either of a pinned module
// fetched through the module proxy, or of this repository (Local).
type GoRecipe struct {
	Name    string `yaml:"name"`
	Module  string `yaml:"module,omitempty"`
	Version string `yaml:"version"`
	// Local is a folder of this repository, relative to the recipes file,
	// holding a main package that imports only what the repository's
	// go.mod provides.
	Local string `yaml:"local,omitempty"`
	// ReplaceStaging replaces every `=> ./staging/...` module of the pinned
	// module's go.mod with its published v0.<minor>.<patch> version, as
	// k8s.io/kubernetes needs.
	ReplaceStaging bool `yaml:"replaceStaging,omitempty"`
	// ReplaceLocal replaces every `=> ./folder` module of the pinned
	// module's go.mod with the same module at the recipe's version: the
	// sub-modules published with it (baremetal-operator's apis and
	// pkg/hardwareutils). A dependency's replace directives are ignored,
	// so the wrapper module must repeat them.
	ReplaceLocal bool `yaml:"replaceLocal,omitempty"`
	// UpstreamSum starts the wrapper's go.sum from the module's own, for
	// modules whose dependencies should be exactly the ones upstream
	// tested, or include a version the checksum database does not know.
	UpstreamSum bool `yaml:"upstreamSum,omitempty"`
	// UncheckedSum is for a module version the checksum database does not
	// know (flannel v0.27.4): go.sum records the hash the module proxy
	// serves, and the build's cache key and the lock pin what was built.
	// It covers the modules Replace takes from the proxy too.
	UncheckedSum bool `yaml:"uncheckedSum,omitempty"`
	// Cgo builds with cgo (flannel's UDP back end is C): the binary then
	// needs the C library, which the image must carry (debs: [libc6]).
	Cgo bool `yaml:"cgo,omitempty"`
	// Replace adds replace directives (module path => folder or
	// module@version), e.g. to build from a local checkout.
	Replace map[string]string `yaml:"replace,omitempty"`
	// Ldflags are text/template strings with .Version, .Major, .Minor and
	// .BuildDate.
	Ldflags  []string  `yaml:"ldflags,omitempty"`
	Packages []Package `yaml:"packages"`
}

// Package is a main package to build. In YAML it is either its import path,
// or {package: PATH, name: BINARY} to name the binary something other than
// `go build` would (go.etcd.io/etcd/server/v3 builds "server").
type Package struct {
	Path string `yaml:"package" json:"package"`
	Name string `yaml:"name,omitempty" json:"name,omitempty"`
}

// UnmarshalYAML accepts a plain import path or a mapping.
func (p *Package) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		p.Path = n.Value
		return nil
	}
	type plain Package
	var v plain
	dec := n.Decode
	if err := dec(&v); err != nil {
		return err
	}
	*p = Package(v)
	return nil
}

// Image is an OCI image made of the shared base layer, the named
// binaries, and optionally files from Debian packages; or (Debian) one
// layer holding a whole Debian root.
type Image struct {
	Ref        string            `yaml:"ref"`
	Binaries   []string          `yaml:"binaries,omitempty"`
	Dir        string            `yaml:"dir,omitempty"`
	Entrypoint []string          `yaml:"entrypoint,omitempty"`
	Debs       []string          `yaml:"debs,omitempty"`
	Symlinks   map[string]string `yaml:"symlinks,omitempty"`
	Debian     *debroot.Spec     `yaml:"debian,omitempty"`
	Env        []string          `yaml:"env,omitempty"`
	// KindNode makes an image of a Debian root a kind node image.
	KindNode *KindNode `yaml:"kindNode,omitempty" json:"kindNode,omitempty"`
}

// KindNode is what makes a Debian root a node image of firstboot's kind
// mode: kind's own node files, the toolchain's Kubernetes binaries,
// /kind/version, and images the node's containerd imports at boot, before
// kubelet starts (kind runs kubeadm init without pulling). The toolchain's
// OCI layout holds it; the stick does not (kind mode runs on a developer's
// host, never on the booted stick).
type KindNode struct {
	// Base is kind's module, module@version: the version firstboot
	// creates clusters with (go.mod's). Files are paths below its
	// images/base/files that the image takes (a script starting with #!
	// is made executable; the module cache keeps no modes).
	Base  string   `yaml:"base"`
	Files []string `yaml:"files"`
	// Binaries of this file, installed in /usr/bin.
	Binaries []string `yaml:"binaries"`
	// Preload are images of this file, by ref.
	Preload []string `yaml:"preload"`
}

// Artifact formats.
const (
	// FormatRamdisk is a kernel and an initramfs holding the whole root
	// (NAME.kernel, NAME.initramfs): the deploy ramdisk.
	FormatRamdisk = "ramdisk"
	// FormatQcow2 is a bootable whole-disk image (NAME.qcow2): GPT, a
	// BIOS boot partition, an EFI system partition and the root.
	FormatQcow2 = "qcow2"
)

// Artifact is a file (or a kernel and initramfs) made from a Debian root.
type Artifact struct {
	Name   string       `yaml:"name"`
	Format string       `yaml:"format"`
	Debian debroot.Spec `yaml:"debian"`
	// Modules, for a ramdisk, are the kernel module folders (below
	// lib/modules/VERSION/kernel) it keeps; empty keeps all.
	Modules []string `yaml:"modules,omitempty"`
	// Firmware, for a ramdisk, are the kernel modules whose firmware files
	// (modinfo's) it keeps; every other file under lib/firmware goes.
	// Empty keeps all.
	Firmware []string `yaml:"firmware,omitempty"`
	// SizeMiB, for a disk image, is the disk's size.
	SizeMiB int `yaml:"sizeMiB,omitempty"`
}

// Files are the file names an artifact ships as.
func (a *Artifact) Files() []string {
	if a.Format == FormatRamdisk {
		return []string{a.Name + ".kernel", a.Name + ".initramfs"}
	}
	return []string{a.Name + ".qcow2"}
}

// ModVersion names the recipe's source for messages: module@version, or the
// local folder.
func (r *GoRecipe) ModVersion() string {
	if r.Local != "" {
		return "local " + r.Local + "@" + r.Version
	}
	return r.Module + "@" + r.Version
}

// BinaryNames is the name of the binary each package builds to, in order:
// its Name when given, else the name `go build` gives it.
func (r *GoRecipe) BinaryNames() []string {
	out := make([]string, len(r.Packages))
	for i, p := range r.Packages {
		out[i] = p.Name
		if out[i] == "" {
			out[i] = r.GoBuildName(p)
		}
	}
	return out
}

// GoBuildName is the name `go build -o DIR/` gives a package's binary: the
// last element of its import path, skipping a /vN suffix.
func (r *GoRecipe) GoBuildName(p Package) string {
	path := p.Path
	if path == "." && r.Local != "" {
		path = r.Local
	}
	return binaryName(path)
}

// Paths are the packages' import paths.
func (r *GoRecipe) Paths() []string {
	out := make([]string, len(r.Packages))
	for i, p := range r.Packages {
		out[i] = p.Path
	}
	return out
}

var majorSuffix = regexp.MustCompile(`^v[0-9]+$`)

func binaryName(pkg string) string {
	pkg = strings.TrimSuffix(filepath.ToSlash(pkg), "/")
	base := path.Base(pkg)
	if majorSuffix.MatchString(base) && strings.Contains(pkg, "/") {
		base = path.Base(path.Dir(pkg))
	}
	return base
}

// Load reads, defaults and validates a recipes file.
func Load(file string) (*Spec, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading recipes: %w", err)
	}
	var r Spec
	doc, err := config.Decode(file, data, Kind, &r)
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(filepath.Dir(file))
	if err != nil {
		return nil, fmt.Errorf("reading recipes %s: %w", file, err)
	}
	r.Dir = abs
	r.defaults()
	if err := doc.Problems(r.Validate()); err != nil {
		return nil, err
	}
	return &r, nil
}

func (r *Spec) defaults() {
	for i := range r.Images {
		im := &r.Images[i]
		if im.Dir == "" {
			im.Dir = "/usr/local/bin"
		}
		if len(im.Entrypoint) == 0 && len(im.Binaries) > 0 {
			im.Entrypoint = []string{path.Join(im.Dir, im.Binaries[0])}
		}
	}
}

var recipeName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)

// Validate reports every problem with its field path.
func (r *Spec) Validate() field.ErrorList {
	var errs field.ErrorList
	bins := map[string]string{} // binary name -> recipe
	names := map[string]bool{}
	bp := field.NewPath("binaries")
	if len(r.Binaries) == 0 {
		errs = append(errs, field.Required(bp, "name at least one recipe"))
	}
	for i, g := range r.Binaries {
		p := bp.Index(i)
		switch {
		case g.Name == "":
			errs = append(errs, field.Required(p.Child("name"), ""))
		case !recipeName.MatchString(g.Name):
			errs = append(errs, field.Invalid(p.Child("name"), g.Name, "use lower-case letters, digits and '-'"))
		case names[g.Name]:
			errs = append(errs, field.Duplicate(p.Child("name"), g.Name))
		}
		names[g.Name] = true
		switch {
		case g.Module == "" && g.Local == "":
			errs = append(errs, field.Required(p.Child("module"), "give a module path, or local: a folder of this repository"))
		case g.Module != "" && g.Local != "":
			errs = append(errs, field.Forbidden(p.Child("local"), "give module or local, not both"))
		case g.Module != "":
			if err := module.CheckPath(g.Module); err != nil {
				errs = append(errs, field.Invalid(p.Child("module"), g.Module, err.Error()))
			}
			if !semver.IsValid(g.Version) {
				errs = append(errs, field.Invalid(p.Child("version"), g.Version, "want a module version such as v1.2.3"))
			}
		case g.Local != "":
			if g.ReplaceStaging || g.ReplaceLocal || g.UpstreamSum || len(g.Replace) > 0 {
				errs = append(errs, field.Forbidden(p.Child("replace"), "a local recipe builds with the repository's go.mod"))
			}
			if fi, err := os.Stat(filepath.Join(r.Dir, g.Local)); err != nil || !fi.IsDir() {
				errs = append(errs, field.NotFound(p.Child("local"), g.Local))
			}
			if g.Version == "" {
				errs = append(errs, field.Required(p.Child("version"), "the version stamped into the binary"))
			}
		}
		if (g.ReplaceStaging || g.ReplaceLocal) && !semver.IsValid(g.Version) {
			errs = append(errs, field.Invalid(p.Child("replaceStaging"), true, "needs a semantic version"))
		}
		for j, l := range g.Ldflags {
			if _, err := template.New("").Option("missingkey=error").Parse(l); err != nil {
				errs = append(errs, field.Invalid(p.Child("ldflags").Index(j), l, err.Error()))
			}
		}
		if len(g.Packages) == 0 {
			errs = append(errs, field.Required(p.Child("packages"), "name at least one main package"))
		}
		goNames := map[string]bool{}
		for j, pkg := range g.Packages {
			if pkg.Path == "" {
				errs = append(errs, field.Required(p.Child("packages").Index(j).Child("package"), "the main package's import path"))
			}
			// go build writes every binary of a recipe into one folder.
			if n := g.GoBuildName(pkg); goNames[n] {
				errs = append(errs, field.Duplicate(p.Child("packages").Index(j), fmt.Sprintf("%s (go build names it %q, as another package of this recipe)", pkg.Path, n)))
			} else {
				goNames[n] = true
			}
		}
		for j, b := range g.BinaryNames() {
			if other, dup := bins[b]; dup {
				errs = append(errs, field.Duplicate(p.Child("packages").Index(j), fmt.Sprintf("%s (binary %q, also built by recipe %s)", g.Packages[j].Path, b, other)))
			}
			bins[b] = g.Name
		}
	}

	ip := field.NewPath("images")
	refs := map[string]bool{}
	for i, im := range r.Images {
		p := ip.Index(i)
		if _, err := name.NewTag(im.Ref, name.StrictValidation); err != nil {
			errs = append(errs, field.Invalid(p.Child("ref"), im.Ref, "want a full image reference with a tag, e.g. registry.k8s.io/pause:3.10.1"))
		} else if refs[im.Ref] {
			errs = append(errs, field.Duplicate(p.Child("ref"), im.Ref))
		}
		refs[im.Ref] = true
		if im.KindNode != nil {
			errs = append(errs, r.validateKindNode(p, im, bins)...)
		}
		switch {
		case im.Debian != nil:
			if len(im.Binaries) > 0 || len(im.Debs) > 0 {
				errs = append(errs, field.Forbidden(p.Child("debian"), "an image of a Debian root has no binaries or debs"))
			}
			if len(im.Entrypoint) == 0 {
				errs = append(errs, field.Required(p.Child("entrypoint"), "the command an image of a Debian root runs"))
			}
			errs = append(errs, validateDebian(r.Dir, p.Child("debian"), im.Debian)...)
		case len(im.Binaries) == 0 && len(im.Debs) == 0:
			errs = append(errs, field.Required(p.Child("binaries"), "name at least one binary, or Debian packages under debs"))
		case len(im.Binaries) == 0 && len(im.Entrypoint) == 0:
			errs = append(errs, field.Required(p.Child("entrypoint"), "the command an image of Debian packages alone runs"))
		}
		for j, b := range im.Binaries {
			if _, ok := bins[b]; !ok {
				errs = append(errs, field.NotFound(p.Child("binaries").Index(j), b))
			}
		}
		if !path.IsAbs(im.Dir) {
			errs = append(errs, field.Invalid(p.Child("dir"), im.Dir, "must be an absolute path"))
		}
		links := make([]string, 0, len(im.Symlinks))
		for l := range im.Symlinks {
			links = append(links, l)
		}
		sort.Strings(links)
		for _, l := range links {
			if !path.IsAbs(l) || path.Clean(l) != l {
				errs = append(errs, field.Invalid(p.Child("symlinks").Key(l), im.Symlinks[l], "the link's path must be absolute and clean"))
			}
		}
		if len(im.Symlinks) > 0 && len(im.Debs) == 0 {
			errs = append(errs, field.Forbidden(p.Child("symlinks"), "symlinks are only for images with debs"))
		}
	}
	ap := field.NewPath("artifacts")
	files := map[string]bool{}
	for i, a := range r.Artifacts {
		p := ap.Index(i)
		if !recipeName.MatchString(a.Name) {
			errs = append(errs, field.Invalid(p.Child("name"), a.Name, "use lower-case letters, digits and '-'"))
		}
		switch a.Format {
		case FormatRamdisk:
		case FormatQcow2:
			if a.SizeMiB < 512 {
				errs = append(errs, field.Invalid(p.Child("sizeMiB"), a.SizeMiB, "a disk image needs at least 512 MiB"))
			}
		default:
			errs = append(errs, field.NotSupported(p.Child("format"), a.Format, []string{FormatRamdisk, FormatQcow2}))
		}
		if len(a.Modules) > 0 && a.Format != FormatRamdisk {
			errs = append(errs, field.Forbidden(p.Child("modules"), "only a ramdisk keeps a part of the kernel's modules"))
		}
		if len(a.Firmware) > 0 && a.Format != FormatRamdisk {
			errs = append(errs, field.Forbidden(p.Child("firmware"), "only a ramdisk keeps a part of the firmware"))
		}
		for _, f := range a.Files() {
			if files[f] {
				errs = append(errs, field.Duplicate(p.Child("name"), a.Name))
			}
			files[f] = true
		}
		errs = append(errs, validateDebian(r.Dir, p.Child("debian"), &a.Debian)...)
	}
	return errs
}

// validateKindNode checks the kindNode of the image at ip.
func (r *Spec) validateKindNode(ip *field.Path, im Image, bins map[string]string) field.ErrorList {
	var errs field.ErrorList
	k, p := im.KindNode, ip.Child("kindNode")
	if im.Debian == nil {
		errs = append(errs, field.Required(ip.Child("debian"), "a kind node image is a Debian root"))
	}
	mod, ver, ok := strings.Cut(k.Base, "@")
	switch {
	case !ok:
		errs = append(errs, field.Invalid(p.Child("base"), k.Base, "want kind's module as module@version, e.g. sigs.k8s.io/kind@v0.30.0"))
	case module.CheckPath(mod) != nil || !semver.IsValid(ver):
		errs = append(errs, field.Invalid(p.Child("base"), k.Base, "want a module path and a version such as v0.30.0"))
	}
	for j, f := range k.Files {
		if f == "" || path.IsAbs(f) || path.Clean(f) != f || strings.HasPrefix(f, "..") {
			errs = append(errs, field.Invalid(p.Child("files").Index(j), f, "a clean path below images/base/files"))
		}
	}
	for j, b := range k.Binaries {
		if _, ok := bins[b]; !ok {
			errs = append(errs, field.NotFound(p.Child("binaries").Index(j), b))
		}
	}
	if len(k.Preload) == 0 {
		errs = append(errs, field.Required(p.Child("preload"), "the images kubeadm init runs (kind pulls nothing)"))
	}
	for j, ref := range k.Preload {
		i := slices.IndexFunc(r.Images, func(o Image) bool { return o.Ref == ref })
		switch {
		case i < 0:
			errs = append(errs, field.NotFound(p.Child("preload").Index(j), ref))
		case r.Images[i].KindNode != nil:
			errs = append(errs, field.Invalid(p.Child("preload").Index(j), ref, "a node image cannot preload a node image"))
		}
	}
	return errs
}

// debianComponents are the Debian archive's components.
var debianComponents = []string{"main", "contrib", "non-free", "non-free-firmware"}

func validateDebian(dir string, p *field.Path, d *debroot.Spec) field.ErrorList {
	var errs field.ErrorList
	if d.Suite == "" {
		errs = append(errs, field.Required(p.Child("suite"), "a Debian suite such as trixie"))
	}
	if len(d.Packages) == 0 {
		errs = append(errs, field.Required(p.Child("packages"), "name at least one package"))
	}
	for i, c := range d.Components {
		if !slices.Contains(debianComponents, c) {
			errs = append(errs, field.NotSupported(p.Child("components").Index(i), c, debianComponents))
		}
	}
	for n := range d.Pins {
		if !slices.Contains(d.Packages, n) {
			errs = append(errs, field.Invalid(p.Child("pins").Key(n), d.Pins[n], "pin only packages the root names"))
		}
	}
	if d.Files != "" {
		if fi, err := os.Stat(filepath.Join(dir, d.Files)); err != nil || !fi.IsDir() {
			errs = append(errs, field.NotFound(p.Child("files"), d.Files))
		}
	}
	return errs
}
