package firstboot

import (
	"bufio"
	"context"

	flag "github.com/spf13/pflag"

	"github.com/bootstick/bootstick/internal/logctx"

	"github.com/bootstick/bootstick/internal/cli"
	"github.com/bootstick/bootstick/internal/render"
	"github.com/bootstick/bootstick/internal/sshkeys"
)

func init() {
	register(cli.Command{
		Name:  "render",
		Usage: "render --site FILE [--bundle DIR] [--ssh-key-dir DIR] [--age-identity FILE] [--show-secrets]",
		Short: "print the Kubernetes objects a site file becomes, as YAML, offline",
		Flags: func(fs *flag.FlagSet) func(context.Context, []string) error {
			var f siteFlags
			f.register(fs)
			keyDir := fs.String("ssh-key-dir", "", "folder with the SSH key pair (made there when missing); without it a throwaway key is used")
			show := fs.Bool("show-secrets", false, "print BMC passwords and the SSH private key instead of a marker")
			imageURL := fs.String("image-base-url", "", "where bundled images are served (default http://PROVISIONING-ADDRESS:6180/images/)")
			return func(ctx context.Context, args []string) error {
				if err := cli.NoArgs(args); err != nil {
					return err
				}
				s, images, err := f.load()
				if err != nil {
					return err
				}
				var key *sshkeys.KeyPair
				if *keyDir != "" {
					k, created, err := sshkeys.LoadOrGenerate(*keyDir)
					if err != nil {
						return err
					}
					if created {
						logctx.From(ctx).Info("generated SSH key pair", "dir", *keyDir, "public", k.Public)
					}
					key = k
				} else {
					k, err := sshkeys.Generate(nil)
					if err != nil {
						return err
					}
					logctx.From(ctx).Warn("no --ssh-key-dir: the objects carry a throwaway SSH key")
					key = k
				}
				if images == nil {
					for _, h := range s.Hosts {
						if h.Image.Bundled != "" {
							logctx.From(ctx).Warn("no --bundle: a bundled image is rendered by name (NAME.qcow2, its digest read at boot from NAME.qcow2.sha256sum); give --bundle for the exact file and digest the stick applies",
								"host", h.Name, "image", h.Image.Bundled)
						}
					}
				}
				objs, err := render.Render(s, render.Options{SSHKey: key, Images: images, ImageBaseURL: *imageURL})
				if err != nil {
					return err
				}
				w := bufio.NewWriter(siteOut)
				if err := render.WriteYAML(w, objs, *show); err != nil {
					return err
				}
				return w.Flush()
			}
		},
	})
}
