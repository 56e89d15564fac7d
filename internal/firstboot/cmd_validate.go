package firstboot

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/bootstick/bootstick/internal/cas"
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

// bundledImages lists the OS images of a bundle: the .qcow2, .raw and .img
// files of DIR/os-images, named by their base name, with the digest from a
// NAME.sha256 file beside them or else computed.
func bundledImages(dir string) ([]site.BundledImage, error) {
	imgDir := filepath.Join(dir, "os-images")
	entries, err := os.ReadDir(imgDir)
	if errors.Is(err, fs.ErrNotExist) {
		return []site.BundledImage{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading bundle images: %w", err)
	}
	formats := map[string]string{".qcow2": "qcow2", ".raw": "raw", ".img": "raw"}
	var out []site.BundledImage
	for _, e := range entries {
		ext := filepath.Ext(e.Name())
		format, ok := formats[ext]
		if !ok || !e.Type().IsRegular() {
			continue
		}
		path := filepath.Join(imgDir, e.Name())
		sum, err := imageDigest(path)
		if err != nil {
			return nil, err
		}
		out = append(out, site.BundledImage{Name: strings.TrimSuffix(e.Name(), ext), File: e.Name(), SHA256: sum, Format: format})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	if out == nil {
		out = []site.BundledImage{}
	}
	return out, nil
}

func imageDigest(path string) (string, error) {
	if f, err := os.Open(path + ".sha256"); err == nil {
		line, _ := bufio.NewReader(f).ReadString('\n')
		f.Close()
		if fields := strings.Fields(line); len(fields) > 0 && len(fields[0]) == 64 {
			if _, err := hex.DecodeString(fields[0]); err == nil {
				return strings.ToLower(fields[0]), nil
			}
		}
		return "", fmt.Errorf("reading bundle image digest %s.sha256: not a sha256sum line", path)
	}
	d, _, err := cas.HashFile(path)
	if err != nil {
		return "", fmt.Errorf("reading bundle image: %w", err)
	}
	return d.Hex(), nil
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
							slog.Warn("bundled image names not checked: give --bundle", "host", h.Name, "image", h.Image.Bundled)
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
