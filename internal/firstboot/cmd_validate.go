package firstboot

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/bootstick/bootstick/internal/logctx"

	"github.com/bootstick/bootstick/internal/bundle"

	"github.com/bootstick/bootstick/internal/cli"
	"github.com/bootstick/bootstick/internal/site"
)

// siteOut is where validate and render print; tests replace it.
var siteOut io.Writer = os.Stdout

// siteFlags are the flags validate and render share.
type siteFlags struct {
	site, bundle, ageIdentity string
}

func (f *siteFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.site, "site", "", "the site file (required)")
	fs.StringVar(&f.bundle, "bundle", "", "the bundle folder (or mounted ISO's /bundle): checks and resolves bundled OS image names")
	fs.StringVar(&f.ageIdentity, "age-identity", "", "age identity file that decrypts encryptedPassword fields")
}

// load reads, resolves and validates the site.
func (f *siteFlags) load() (*site.Site, []site.BundledImage, error) {
	if f.site == "" {
		return nil, nil, cli.Usagef("--site is required")
	}
	var opts site.Options
	if f.bundle != "" {
		images, err := bundledImages(f.bundle)
		if err != nil {
			return nil, nil, err
		}
		opts.BundledImages = images
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
	return s, opts.BundledImages, nil
}

// bundledImages are the OS images a bundle's lock names (none for a bundle
// without a lock: a bare OCI layout carries no OS images).
func bundledImages(dir string) ([]site.BundledImage, error) {
	lock, err := bundle.ReadLock(filepath.Join(dir, "bundle.lock"))
	if err != nil {
		return nil, err
	}
	if lock == nil {
		return []site.BundledImage{}, nil
	}
	return lock.BundledImages(), nil
}

func init() {
	register(cli.Command{
		Name:  "validate",
		Usage: "validate --site FILE [--bundle DIR] [--age-identity FILE]",
		Short: "check a site file offline and list every problem with its line and field path",
		Flags: func(fs *flag.FlagSet) func(context.Context, []string) error {
			var f siteFlags
			f.register(fs)
			return func(ctx context.Context, args []string) error {
				if err := cli.NoArgs(args); err != nil {
					return err
				}
				s, images, err := f.load()
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
				masters := 0
				for _, h := range s.Hosts {
					if h.Role == site.RoleMaster {
						masters++
					}
				}
				fmt.Fprintf(siteOut, "%s: valid: cluster %s, %d hosts (%d masters, %d workers)\n",
					f.site, s.Cluster.Name, len(s.Hosts), masters, len(s.Hosts)-masters)
				return nil
			}
		},
	})
}
