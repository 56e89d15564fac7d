package firstboot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/bootstick/bootstick/internal/osimage"
	"github.com/bootstick/bootstick/internal/render"

	"github.com/bootstick/bootstick/internal/config"

	flag "github.com/spf13/pflag"

	"github.com/bootstick/bootstick/internal/logctx"

	"github.com/bootstick/bootstick/internal/bundle"

	"github.com/bootstick/bootstick/internal/cli"
	"github.com/bootstick/bootstick/internal/site"
	diskfs "github.com/diskfs/go-diskfs"
)

// siteOut is where validate and render print; tests replace it.
var siteOut io.Writer = os.Stdout

// siteFlags are the flags validate and render share.
type siteFlags struct {
	site, bundle, ageIdentity string
}

func (f *siteFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.site, "site", "", "the site file (required)")
	fs.StringVar(&f.bundle, "bundle", "", "the bundle: a folder, or a stick's ISO file; checks and resolves bundled OS image names")
	fs.StringVar(&f.ageIdentity, "age-identity", "", "age identity file that decrypts encryptedPassword fields")
}

// load reads, resolves and validates the site.
func (f *siteFlags) load() (*site.Site, []osimage.Image, error) {
	if f.site == "" {
		return nil, nil, cli.Usagef("--site is required")
	}
	var opts site.Options
	if f.bundle != "" {
		lock, err := readBundleLock(f.bundle)
		if err != nil {
			return nil, nil, err
		}
		opts.BundledImages = []osimage.Image{}
		if lock != nil {
			opts.BundledImages, opts.Plugins = lock.BundledImages(), lock.PluginNames()
		}
	}
	if f.ageIdentity != "" {
		ids, err := site.LoadIdentities(f.ageIdentity)
		if err != nil {
			return nil, nil, err
		}
		opts.Identities = ids
	}
	s, err := site.Load(f.site, opts)
	if err != nil {
		return nil, nil, err
	}
	// What validates must also pass the baremetal-operator's webhook.
	if err := render.Check(s, render.Options{Images: opts.BundledImages}); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", f.site, err)
	}
	return s, opts.BundledImages, nil
}

// bundledImages are the OS images a bundle's lock names (none for a bundle
// without a lock: a bare OCI layout carries no OS images).
func bundledImages(dir string) ([]osimage.Image, error) {
	lock, err := bundle.ReadLock(filepath.Join(dir, "bundle.lock"))
	if err != nil {
		return nil, err
	}
	if lock == nil {
		return []osimage.Image{}, nil
	}
	return lock.BundledImages(), nil
}

// readBundleLock is the lock of the bundle b: a folder, or a stick's ISO
// file, read where it lies (no mount, no root); nil for a bundle without
// one (its images are then known by name only, its plugins unchecked).
func readBundleLock(b string) (*bundle.Lock, error) {
	fi, err := os.Stat(b)
	if err != nil {
		return nil, fmt.Errorf("bundle %s: %w", b, err)
	}
	if fi.IsDir() {
		return bundle.ReadLock(filepath.Join(b, "bundle.lock"))
	}
	d, err := diskfs.Open(b, diskfs.WithOpenMode(diskfs.ReadOnly))
	if err != nil {
		return nil, fmt.Errorf("bundle %s: neither a folder nor an ISO file: %w", b, err)
	}
	defer d.Close()
	fsys, err := d.GetFilesystem(0)
	if err != nil {
		return nil, fmt.Errorf("bundle %s: neither a folder nor an ISO file: %w", b, err)
	}
	data, err := fs.ReadFile(fsys, "bundle/bundle.lock")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("bundle %s: reading /bundle/bundle.lock: %w", b, err)
	}
	return bundle.ParseLock(b+":/bundle/bundle.lock", data)
}

func init() {
	register(cli.Command{
		Name:  "validate",
		Usage: "validate --site FILE [--bundle DIR] [--age-identity FILE]",
		Short: "check a site file offline and list every problem with its line and field path",
		Flags: func(fs *flag.FlagSet) func(context.Context, []string) error {
			var f siteFlags
			f.register(fs)
			asJSON := fs.Bool("json", false, "print the result as JSON (every problem with its line and field path); the exit code is the same")
			return func(ctx context.Context, args []string) error {
				if err := cli.NoArgs(args); err != nil {
					return err
				}
				s, images, err := f.load()
				if *asJSON {
					return writeValidation(f.site, s, err)
				}
				if err != nil {
					return err
				}
				if images == nil {
					for _, h := range s.Hosts {
						if h.Image.Bundled != "" {
							logctx.From(ctx).Warn("bundled image names not checked: give --bundle", "host", h.Name, "image", h.Image.Bundled)
						}
					}
				}
				masters := countMasters(s)
				fmt.Fprintf(siteOut, "%s: valid: cluster %s, %d hosts (%d masters, %d workers)\n",
					f.site, s.Cluster.Name, len(s.Hosts), masters, len(s.Hosts)-masters)
				for _, n := range s.Notes() {
					fmt.Fprintf(siteOut, "note: %s\n", n)
				}
				return nil
			}
		},
	})
}

func countMasters(s *site.Site) int {
	n := 0
	for _, h := range s.Hosts {
		if h.Role == site.RoleMaster {
			n++
		}
	}
	return n
}

// Validation is what `validate --json` prints.
type Validation struct {
	Site     string           `json:"site"`
	Valid    bool             `json:"valid"`
	Cluster  string           `json:"cluster,omitempty"`
	Masters  int              `json:"masters"`
	Workers  int              `json:"workers"`
	Problems []config.Problem `json:"problems,omitempty"`
	// Notes are what a valid site asks that this stick cannot fully
	// serve (site.Notes).
	Notes []string `json:"notes,omitempty"`
	// Error is a failure that is not a list of problems (an unreadable file).
	Error string `json:"error,omitempty"`
}

// writeValidation prints the result of loading a site as JSON and returns
// an error (exit code 1) when the site is not valid; the problems are in
// the JSON, so the error says no more.
func writeValidation(path string, s *site.Site, err error) error {
	v := Validation{Site: path, Valid: err == nil}
	var pe *config.ProblemsError
	switch {
	case errors.As(err, &pe):
		v.Problems = pe.Problems
	case err != nil:
		v.Error = err.Error()
	default:
		v.Cluster, v.Masters = s.Cluster.Name, countMasters(s)
		v.Workers = len(s.Hosts) - v.Masters
		v.Notes = s.Notes()
	}
	enc := json.NewEncoder(siteOut)
	enc.SetIndent("", "  ")
	if werr := enc.Encode(v); werr != nil {
		return werr
	}
	if err != nil {
		return exitCode(1)
	}
	return nil
}

// exitCode is an error that only sets the exit code: what went wrong was
// printed already.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d (see the output above)", int(e)) }
func (e exitCode) ExitCode() int { return int(e) }
