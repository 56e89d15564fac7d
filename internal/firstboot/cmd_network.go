package firstboot

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	flag "github.com/spf13/pflag"

	"github.com/bootstick/bootstick/internal/cli"
	"github.com/bootstick/bootstick/internal/hostnet"
	"github.com/bootstick/bootstick/internal/site"
)

// defaultSite is where mkusb build --site puts the site on the stick.
const defaultSite = "/run/live/medium/bundle/site/site.yaml"

func init() {
	register(cli.Command{
		Name:  "network",
		Usage: "network [--site FILE]",
		Short: "give the bootstrap machine its site addresses (and default route) and let the site's SSH keys log in as root",
		Flags: func(fs *flag.FlagSet) func(ctx context.Context, args []string) error {
			sitePath := fs.String("site", defaultSite, "the site file")
			return func(ctx context.Context, args []string) error {
				if err := cli.NoArgs(args); err != nil {
					return err
				}
				data, err := os.ReadFile(*sitePath)
				if os.IsNotExist(err) && *sitePath == defaultSite {
					fmt.Fprintf(os.Stderr, "firstboot network: the stick carries no site (%s); nothing to configure\n", filepath.Dir(defaultSite))
					return nil
				}
				if err != nil {
					return fmt.Errorf("reading site: %w", err)
				}
				c, err := hostnet.FromSite(*sitePath, data)
				if err != nil {
					return err
				}
				if c.NoRouter() {
					// The console shows it: the node's address is then the
					// provisioning address.
					fmt.Fprintf(os.Stderr, "firstboot network: the site names no gateway: the default route goes onto the provisioning network (%s), and the node's address is %s\n",
						c.Links[0].Interface, c.Links[0].Address)
				}
				if err := hostnet.Apply(ctx, c, hostnet.Options{}); err != nil {
					return err
				}
				// The firewall before sshd and firstboot start: firstboot's
				// firewall step checks it, and fails loudly if it is not
				// loaded; a login stays possible here either way.
				early, err := site.ParseEarly(*sitePath, data)
				if err == nil {
					err = loadFirewall(ctx, early, "", defaultPaths(defaultData).firewallRules())
				}
				if err != nil {
					fmt.Fprintf(os.Stderr, "firstboot network: the firewall is not loaded (firstboot's firewall step tries again): %v\n", err)
				}
				return nil
			}
		},
	})
}
