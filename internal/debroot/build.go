package debroot

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/bootstick/bootstick/internal/command"
	"github.com/bootstick/bootstick/internal/debs"
)

// Spec is a root file system made of Debian packages.
type Spec struct {
	// Suite is the Debian suite, e.g. trixie.
	Suite string `yaml:"suite" json:"suite"`
	// Variant is mmdebstrap's variant; "essential" when empty (dpkg and
	// what the packages need, no apt).
	Variant string `yaml:"variant,omitempty" json:"variant,omitempty"`
	// Components are the archive's components the packages come from;
	// main only when empty (non-free-firmware holds the firmware of
	// servers' NICs).
	Components []string `yaml:"components,omitempty" json:"components,omitempty"`
	// Packages are installed with their dependencies.
	Packages []string `yaml:"packages" json:"packages"`
	// Pins are upstream versions (no epoch, no Debian revision) the build
	// must install, by package: the build fails when the mirror offers
	// another.
	Pins map[string]string `yaml:"pins,omitempty" json:"pins,omitempty"`
	// Placeholders are packages replaced by empty ones: hard dependencies
	// a package declares but never uses.
	Placeholders []string `yaml:"placeholders,omitempty" json:"placeholders,omitempty"`
	// Patches (relative to the recipes file) are unified diffs applied to
	// the installed root (patch -p1 from the root), each the smallest fix
	// of a named upstream defect. One that does not apply fails the build.
	Patches []string `yaml:"patches,omitempty" json:"patches,omitempty"`
	// Files is a folder (relative to the recipes file) laid onto the root
	// after the install, modes and symbolic links kept.
	Files string `yaml:"files,omitempty" json:"files,omitempty"`
	// Remove are paths or globs (relative to the root) removed after the
	// install, besides documentation and apt's caches.
	Remove []string `yaml:"remove,omitempty" json:"remove,omitempty"`
}

// Installed is one package of a built root.
type Installed struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// Options say where a root's inputs come from.
type Options struct {
	// Sources are the spec's suite with its -updates and -security.
	Sources debs.Sources
	// DebCache keeps downloaded .deb files across builds.
	DebCache string
	// FilesDir is where Spec.Files and Spec.Patches are relative to.
	FilesDir string
	Epoch    time.Time
}

// removedAlways is of no use in an image, a ramdisk or a compute OS.
var removedAlways = []string{
	"usr/share/doc/*", "usr/share/man/*", "usr/share/info/*", "usr/share/lintian/*",
	"var/cache/apt/*", "var/lib/apt/lists/*", "var/log/*", "var/cache/debconf/*-old",
	"dev/*", "proc/*", "sys/*", "run/*", "tmp/*",
}

// Build makes the root at root (which must not exist) and returns what it
// installed. It fails, naming them, when a pinned package's version differs.
func Build(ctx context.Context, s Spec, root string, o Options) ([]Installed, error) {
	if o.Sources.Suite != s.Suite {
		return nil, fmt.Errorf("debian root: the sources are of suite %q, the root's is %q", o.Sources.Suite, s.Suite)
	}
	work, err := os.MkdirTemp(filepath.Dir(root), ".placeholders-")
	if err != nil {
		return nil, fmt.Errorf("debian root: %w", err)
	}
	defer os.RemoveAll(work)
	include := append([]string(nil), s.Packages...)
	for _, p := range s.Placeholders {
		deb, err := placeholder(ctx, work, p)
		if err != nil {
			return nil, err
		}
		include = append(include, deb)
	}
	variant := s.Variant
	if variant == "" {
		variant = "essential"
	}
	args := []string{
		// A root made once and booted many times: systemd makes the
		// machine id at boot.
		"--customize-hook=rm -f \"$1\"/etc/machine-id \"$1\"/var/lib/dbus/machine-id; touch \"$1\"/etc/machine-id",
	}
	for _, p := range []string{"/usr/share/doc/*", "/usr/share/man/*", "/usr/share/info/*", "/usr/share/locale/*"} {
		args = append(args, "--dpkgopt=path-exclude="+p)
	}
	args = append(args, "--dpkgopt=path-include=/usr/share/locale/locale.alias")
	if err := Mmdebstrap(ctx, Run{Sources: o.Sources, Components: s.Components, Variant: variant, Include: include,
		DebCache: o.DebCache, Args: args, Epoch: o.Epoch}, root); err != nil {
		return nil, err
	}
	if len(s.Placeholders) > 0 {
		// mmdebstrap's file-mirror-automount hook leaves the mount points
		// of the placeholder .debs in the root: empty files under a copy
		// of this build's folder path, which differs every build.
		if err := removeMountPoints(root, work); err != nil {
			return nil, fmt.Errorf("debian root: %w", err)
		}
	}
	installed, err := ListInstalled(ctx, root)
	if err != nil {
		return nil, err
	}
	if err := checkPins(s.Pins, installed); err != nil {
		return nil, fmt.Errorf("debian root (%s): %w", o.Sources, err)
	}
	if err := applyPatches(ctx, root, o.FilesDir, s.Patches); err != nil {
		return nil, fmt.Errorf("debian root (suite %s): %w", s.Suite, err)
	}
	if s.Files != "" {
		src := filepath.Join(o.FilesDir, s.Files)
		if fi, err := os.Stat(src); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("debian root: files %s is not a folder", src)
		}
		if _, err := command.Run(ctx, command.Options{}, "cp", "-a", "--no-preserve=ownership", src+"/.", root+"/"); err != nil {
			return nil, fmt.Errorf("debian root: laying %s onto the root: %w", src, err)
		}
	}
	for _, g := range append(append([]string(nil), removedAlways...), s.Remove...) {
		matches, err := filepath.Glob(filepath.Join(root, g))
		if err != nil {
			return nil, fmt.Errorf("debian root: remove %q: %w", g, err)
		}
		for _, m := range matches {
			if err := SafeRemove(m); err != nil {
				return nil, fmt.Errorf("debian root: %w", err)
			}
		}
	}
	return installed, nil
}

// removeMountPoints removes dir (a folder of this machine) from inside
// root, and then each of its parents inside root that is left empty.
func removeMountPoints(root, dir string) error {
	inside := filepath.Join(root, dir)
	if err := SafeRemove(inside); err != nil {
		return err
	}
	// The root's top folders (tmp, var, ...) stay, even when empty.
	for p := filepath.Dir(inside); len(p) > len(root) && filepath.Dir(p) != filepath.Clean(root); p = filepath.Dir(p) {
		if os.Remove(p) != nil { // not empty: it was the root's own
			break
		}
	}
	return nil
}

// applyPatches applies each patch (relative to dir) to root, in order.
func applyPatches(ctx context.Context, root, dir string, patches []string) error {
	for _, p := range patches {
		path := filepath.Join(dir, p)
		if _, err := command.Run(ctx, command.Options{}, "patch", "-d", root, "-p1", "--forward", "--batch", "--no-backup-if-mismatch", "-i", path); err != nil {
			return fmt.Errorf("patch %s does not apply to the installed packages (a new upstream version may have fixed it: drop it from the recipe): %w", path, err)
		}
	}
	return nil
}

// ListInstalled lists the packages dpkg installed in root.
func ListInstalled(ctx context.Context, root string) ([]Installed, error) {
	out, err := command.Output(ctx, command.Options{}, "dpkg-query", "--admindir="+filepath.Join(root, "var/lib/dpkg"),
		"-W", "-f", "${db:Status-Abbrev}\t${Package}\t${Version}\n")
	if err != nil {
		return nil, fmt.Errorf("listing the packages of %s: %w", root, err)
	}
	var pkgs []Installed
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Split(l, "\t")
		if len(f) != 3 || !strings.HasPrefix(f[0], "ii") {
			continue
		}
		pkgs = append(pkgs, Installed{Name: f[1], Version: f[2]})
	}
	sort.Slice(pkgs, func(i, j int) bool { return pkgs[i].Name < pkgs[j].Name })
	return pkgs, nil
}

// Upstream is a Debian version without its epoch and Debian revision:
// 1:29.0.5-0+deb13u3 is 29.0.5.
func Upstream(v string) string {
	if _, after, ok := strings.Cut(v, ":"); ok {
		v = after
	}
	if i := strings.LastIndexByte(v, '-'); i >= 0 {
		v = v[:i]
	}
	return v
}

func checkPins(pins map[string]string, installed []Installed) error {
	have := map[string]string{}
	for _, p := range installed {
		have[p.Name] = p.Version
	}
	names := make([]string, 0, len(pins))
	for n := range pins {
		names = append(names, n)
	}
	sort.Strings(names)
	var bad []string
	for _, n := range names {
		v, ok := have[n]
		switch {
		case !ok:
			bad = append(bad, fmt.Sprintf("%s: pinned at %s, not installed", n, pins[n]))
		case Upstream(v) != pins[n]:
			bad = append(bad, fmt.Sprintf("%s: pinned at %s, the mirror gave %s", n, pins[n], v))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("pinned packages differ:\n  %s\nchange the pins in images/recipes.yaml after checking the new versions, or use a mirror (snapshot) that serves the pinned ones", strings.Join(bad, "\n  "))
	}
	return nil
}

// placeholder builds an empty package named name (as equivs does) that
// satisfies any versioned dependency on it.
func placeholder(ctx context.Context, work, name string) (string, error) {
	dir := filepath.Join(work, name)
	if err := os.MkdirAll(filepath.Join(dir, "DEBIAN"), 0o755); err != nil {
		return "", fmt.Errorf("placeholder %s: %w", name, err)
	}
	control := fmt.Sprintf(`Package: %s
Version: 99:0-bootstick
Architecture: all
Maintainer: bootstick <placeholder@bootstick.invalid>
Priority: optional
Section: misc
Description: empty placeholder for %s
 A hard dependency that the packages of this root never use.
`, name, name)
	if err := os.WriteFile(filepath.Join(dir, "DEBIAN", "control"), []byte(control), 0o644); err != nil {
		return "", fmt.Errorf("placeholder %s: %w", name, err)
	}
	deb := filepath.Join(work, name+"_99.0-bootstick_all.deb")
	if _, err := command.Run(ctx, command.Options{}, "dpkg-deb", "--root-owner-group", "-Zgzip", "--build", dir, deb); err != nil {
		return "", fmt.Errorf("placeholder %s: %w", name, err)
	}
	return deb, nil
}
