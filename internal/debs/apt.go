package debs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/command"
	"github.com/bootstick/bootstick/internal/logctx"
)

// Keyring checks the Debian archive's signatures (package
// debian-archive-keyring; it holds the keys of the current suites).
const Keyring = "/usr/share/keyrings/debian-archive-keyring.gpg"

// Apt reads a suite with its -updates and -security suites (Sources)
// through an apt configuration of its own, under Dir: the build host's apt
// sources, lists and preferences are neither read nor changed. A bookworm
// host resolves trixie packages this way.
type Apt struct {
	Sources
	// Dir keeps the configuration and the package lists, one folder per
	// suite and mirrors.
	Dir string

	once sync.Once
	err  error
}

func (a *Apt) root() string {
	h := sha256.Sum256([]byte(a.Mirror + "\n" + a.SecurityMirror))
	return filepath.Join(a.Dir, a.Suite+"-"+hex.EncodeToString(h[:4]))
}

// options point apt at the folder.
func (a *Apt) options() []string {
	r := a.root()
	return []string{
		"-o", "Dir::Etc::SourceList=" + filepath.Join(r, "sources.list"),
		"-o", "Dir::Etc::SourceParts=" + filepath.Join(r, "empty"),
		"-o", "Dir::Etc::Preferences=" + filepath.Join(r, "empty", "preferences"),
		"-o", "Dir::Etc::PreferencesParts=" + filepath.Join(r, "empty"),
		"-o", "Dir::State::Lists=" + filepath.Join(r, "lists"),
		"-o", "Dir::State::status=" + filepath.Join(r, "status"),
		"-o", "Dir::Cache=" + filepath.Join(r, "cache"),
		"-o", "APT::Sandbox::User=root",
		"-o", "Debug::NoLocking=1",
	}
}

// update writes the configuration and fetches the lists, once per Apt.
// When the mirror cannot be reached, lists fetched before are used.
func (a *Apt) update(ctx context.Context) error {
	a.once.Do(func() {
		r := a.root()
		for _, d := range []string{filepath.Join(r, "empty"), filepath.Join(r, "lists", "partial"), filepath.Join(r, "cache", "archives", "partial")} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				a.err = fmt.Errorf("apt configuration for %s: %w", a.Suite, err)
				return
			}
		}
		lines, err := a.Lines(nil)
		if err != nil {
			a.err = fmt.Errorf("apt configuration: %w", err)
			return
		}
		if err := os.WriteFile(filepath.Join(r, "sources.list"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			a.err = fmt.Errorf("apt configuration for %s: %w", a.Suite, err)
			return
		}
		if err := os.WriteFile(filepath.Join(r, "status"), nil, 0o644); err != nil {
			a.err = fmt.Errorf("apt configuration for %s: %w", a.Suite, err)
			return
		}
		_, err = command.Run(ctx, command.Options{}, append(append([]string{"apt-get"}, a.options()...), "update", "-q")...)
		if err == nil {
			return
		}
		if a.haveLists() {
			logctx.From(ctx).Warn("could not refresh the package lists; using the ones fetched before", "sources", a.Sources.String(), "err", err)
			return
		}
		a.err = fmt.Errorf("fetching the package lists of %s (check that the mirrors serve these suites; a bundle names them in os.mirror and os.securityMirror): %w", a.Sources, err)
	})
	return a.err
}

// haveLists reports whether lists fetched before hold every suite: a
// build never goes on without the security suite because it alone could
// not be fetched.
func (a *Apt) haveLists() bool {
	for _, suite := range a.Suites() {
		if lists, _ := filepath.Glob(filepath.Join(a.root(), "lists", "*_dists_"+suite+"_*Packages*")); len(lists) == 0 {
			return false
		}
	}
	return true
}

// Resolve finds the candidate version of each package, the highest that
// the suite, its -updates and its -security serve, the suite it comes
// from, and its source package.
func (a *Apt) Resolve(ctx context.Context, names []string) ([]Package, error) {
	if len(names) == 0 {
		return nil, nil
	}
	if err := a.update(ctx); err != nil {
		return nil, err
	}
	pkgs, err := resolve(ctx, a.options(), names, true)
	if err != nil {
		return nil, err
	}
	if err := a.origins(ctx, pkgs); err != nil {
		return nil, err
	}
	return pkgs, nil
}

// origins sets each package's Suite: the first of a.Suites() that serves
// its version (a version a point release took into the suite itself is
// the suite's, though -security may still serve it).
func (a *Apt) origins(ctx context.Context, pkgs []Package) error {
	names := make([]string, len(pkgs))
	for i, p := range pkgs {
		names[i] = p.Name
	}
	out, err := command.Output(ctx, command.Options{}, append(append(append([]string{"apt-cache"}, a.options()...), "madison"), names...)...)
	if err != nil {
		return fmt.Errorf("finding the suites of Debian packages %s: %w", strings.Join(names, " "), err)
	}
	served := parseMadison(out)
	for i, p := range pkgs {
		if pkgs[i].Suite = suiteOf(served, p, a.Suites()); pkgs[i].Suite == "" {
			return fmt.Errorf("Debian package %s: apt names none of %s as serving it", p, strings.Join(a.Suites(), ", "))
		}
	}
	return nil
}

// suiteOf is the first of suites that serves p's version, or "".
func suiteOf(served map[string]map[string]bool, p Package, suites []string) string {
	for _, suite := range suites {
		if served[p.String()][suite] {
			return suite
		}
	}
	return ""
}

// parseMadison reads apt-cache madison's lines
// ("name | version | URI suite/component arch Packages") into the suites
// serving each name=version.
func parseMadison(out []byte) map[string]map[string]bool {
	served := map[string]map[string]bool{}
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Split(l, "|")
		if len(f) != 3 {
			continue
		}
		idx := strings.Fields(f[2])
		if len(idx) < 4 || idx[len(idx)-1] != "Packages" {
			continue
		}
		suite, _, _ := strings.Cut(idx[1], "/")
		key := strings.TrimSpace(f[0]) + "=" + strings.TrimSpace(f[1])
		if served[key] == nil {
			served[key] = map[string]bool{}
		}
		served[key][suite] = true
	}
	return served
}

// Fetch is the package Fetch, from the suites.
func (a *Apt) Fetch(ctx context.Context, store *cas.Store, pkgs []Package, workDir string) error {
	if err := a.update(ctx); err != nil {
		return err
	}
	return fetch(ctx, a.options(), store, pkgs, workDir)
}
