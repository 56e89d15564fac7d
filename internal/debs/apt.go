package debs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/command"
	"github.com/bootstick/bootstick/internal/logctx"
)

// Keyring checks the Debian archive's signatures (package
// debian-archive-keyring; it holds the keys of the current suites).
const Keyring = "/usr/share/keyrings/debian-archive-keyring.gpg"

// Apt reads one suite of one mirror through an apt configuration of its
// own, under Dir: the build host's apt sources, lists and preferences are
// neither read nor changed. A bookworm host resolves trixie packages this
// way.
type Apt struct {
	Suite, Mirror string
	// Dir keeps the configuration and the package lists, one folder per
	// suite and mirror.
	Dir string

	once sync.Once
	err  error
}

func (a *Apt) root() string {
	h := sha256.Sum256([]byte(a.Mirror))
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
		list := fmt.Sprintf("deb [signed-by=%s] %s %s main\n", Keyring, a.Mirror, a.Suite)
		if err := os.WriteFile(filepath.Join(r, "sources.list"), []byte(list), 0o644); err != nil {
			a.err = fmt.Errorf("apt configuration for %s: %w", a.Suite, err)
			return
		}
		if err := os.WriteFile(filepath.Join(r, "status"), nil, 0o644); err != nil {
			a.err = fmt.Errorf("apt configuration for %s: %w", a.Suite, err)
			return
		}
		_, err := command.Run(ctx, command.Options{}, append(append([]string{"apt-get"}, a.options()...), "update", "-q")...)
		if err == nil {
			return
		}
		if lists, _ := filepath.Glob(filepath.Join(r, "lists", "*_Packages*")); len(lists) > 0 {
			logctx.From(ctx).Warn("could not refresh the package lists; using the ones fetched before", "suite", a.Suite, "mirror", a.Mirror, "err", err)
			return
		}
		a.err = fmt.Errorf("fetching the package lists of %s from %s: %w", a.Suite, a.Mirror, err)
	})
	return a.err
}

// Resolve finds the candidate version of each package in the suite.
func (a *Apt) Resolve(ctx context.Context, names []string) ([]Package, error) {
	if len(names) == 0 {
		return nil, nil
	}
	if err := a.update(ctx); err != nil {
		return nil, err
	}
	return resolve(ctx, a.options(), names)
}

// Fetch is the package Fetch, from the suite.
func (a *Apt) Fetch(ctx context.Context, store *cas.Store, pkgs []Package, workDir string) error {
	if err := a.update(ctx); err != nil {
		return err
	}
	return fetch(ctx, a.options(), store, pkgs, workDir)
}
