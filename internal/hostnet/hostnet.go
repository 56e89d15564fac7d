// Package hostnet sets the bootstrap machine up from its site file before
// anything else runs: the provisioning and external interfaces get their
// addresses (and the external one the default route; on a site with no
// router, the provisioning network is the default route), and the site's SSH
// keys may log in as root. The live system keeps none of this across a
// reboot, so it runs on every boot; each action replaces rather than adds,
// so running it twice changes nothing.
package hostnet

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/bootstick/bootstick/internal/command"

	"github.com/bootstick/bootstick/internal/site"

	"github.com/bootstick/bootstick/internal/atomicfile"
)

// Link is one interface to configure.
type Link struct {
	Interface string
	Address   string // with its prefix, e.g. 172.22.0.1/24
	Gateway   string // optional: the default route
}

// Config is what the site asks of the bootstrap machine.
type Config struct {
	Links          []Link
	DNS            []string
	AuthorizedKeys []string
}

// FromSite reads a site file's bootstrap networks and SSH keys.
func FromSite(path string, data []byte) (Config, error) {
	s, err := site.ParseEarly(path, data)
	if err != nil {
		return Config{}, err
	}
	var c Config
	p := s.Bootstrap.Provisioning
	if p.Interface == "" || p.Address == "" {
		return Config{}, fmt.Errorf("site %s: bootstrap.provisioning needs interface and address (check it with firstboot validate)", path)
	}
	c.Links = append(c.Links, Link{Interface: p.Interface, Address: p.Address})
	if e := s.Bootstrap.External; e != nil && e.Interface != "" && e.Address != "" {
		c.Links = append(c.Links, Link{Interface: e.Interface, Address: e.Address, Gateway: e.Gateway})
	}
	for _, l := range c.Links {
		if _, err := netip.ParsePrefix(l.Address); err != nil {
			return Config{}, fmt.Errorf("site %s: interface %s: address %q: %w", path, l.Interface, l.Address, err)
		}
		if l.Gateway != "" {
			if _, err := netip.ParseAddr(l.Gateway); err != nil {
				return Config{}, fmt.Errorf("site %s: interface %s: gateway %q: %w", path, l.Interface, l.Gateway, err)
			}
		}
	}
	c.DNS = s.Bootstrap.DNS
	c.AuthorizedKeys = s.SSHAuthorizedKeys
	return c, nil
}

// NoRouterMetric is the metric of the on-link default route of a site
// with no router: any other default route wins over it.
const NoRouterMetric = "4096"

// NoRouter says whether the site names no gateway: the machine then has
// no default route of its own.
func (c Config) NoRouter() bool {
	return !slices.ContainsFunc(c.Links, func(l Link) bool { return l.Gateway != "" })
}

// Commands are the ip(8) invocations that bring the links up, in order.
// A site with no router gets a default route straight onto the
// provisioning network (the first link): Kubernetes finds the node's
// address through the default route (kubeadm, kubelet, kube-proxy), and
// a host-network process reaches the cluster's service addresses only
// through a route, so the node's address is then the provisioning
// address, where the hosts route to it.
func Commands(c Config) [][]string {
	var cmds [][]string
	for _, l := range c.Links {
		cmds = append(cmds,
			[]string{"link", "set", "dev", l.Interface, "up"},
			[]string{"addr", "replace", l.Address, "dev", l.Interface})
		if l.Gateway != "" {
			cmds = append(cmds, []string{"route", "replace", "default", "via", l.Gateway, "dev", l.Interface})
		}
	}
	if len(c.Links) > 0 && c.NoRouter() {
		cmds = append(cmds, []string{"route", "replace", "default", "dev", c.Links[0].Interface, "metric", NoRouterMetric})
	}
	return cmds
}

// MergeAuthorizedKeys returns an authorized_keys file with the existing
// lines and then each key not yet in it.
func MergeAuthorizedKeys(existing []byte, keys []string) []byte {
	var lines []string
	for _, l := range strings.Split(string(existing), "\n") {
		if strings.TrimSpace(l) != "" {
			lines = append(lines, l)
		}
	}
	for _, k := range keys {
		k = strings.TrimSpace(k)
		if k != "" && !slices.Contains(lines, k) {
			lines = append(lines, k)
		}
	}
	if len(lines) == 0 {
		return nil
	}
	return []byte(strings.Join(lines, "\n") + "\n")
}

// Options say where Apply acts; the zero value is the real machine.
type Options struct {
	IP         string        // the ip binary; default "ip"
	SysNet     string        // default /sys/class/net
	RootSSH    string        // default /root/.ssh
	ResolvConf string        // default /etc/resolv.conf
	Wait       time.Duration // for the interfaces to appear; default 60s
}

// Apply configures the machine. It waits for each interface (udev renames
// them early in boot) and names the ones that exist when one never shows.
func Apply(ctx context.Context, c Config, o Options) error {
	if o.IP == "" {
		o.IP = "ip"
	}
	if o.SysNet == "" {
		o.SysNet = "/sys/class/net"
	}
	if o.RootSSH == "" {
		o.RootSSH = "/root/.ssh"
	}
	if o.ResolvConf == "" {
		o.ResolvConf = "/etc/resolv.conf"
	}
	if o.Wait == 0 {
		o.Wait = 60 * time.Second
	}
	// The keys first: with them, an operator can log in to see why a
	// network did not come up.
	var errs []error
	if len(c.AuthorizedKeys) > 0 {
		if err := writeKeys(o.RootSSH, c.AuthorizedKeys); err != nil {
			errs = append(errs, err)
		}
	}
	for _, l := range c.Links {
		if err := waitLink(ctx, o.SysNet, l.Interface, o.Wait); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		for _, args := range Commands(c) {
			if _, err := command.Run(ctx, command.Options{}, append([]string{o.IP}, args...)...); err != nil {
				errs = append(errs, err)
				break
			}
		}
	}
	if len(c.DNS) > 0 {
		var b strings.Builder
		b.WriteString("# written by firstboot network from the site's bootstrap.dns\n")
		for _, d := range c.DNS {
			fmt.Fprintf(&b, "nameserver %s\n", d)
		}
		if err := atomicfile.Write(o.ResolvConf, []byte(b.String()), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("writing %s: %w", o.ResolvConf, err))
		}
	}
	return errors.Join(errs...)
}

func writeKeys(dir string, keys []string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("root's SSH keys: %w", err)
	}
	path := filepath.Join(dir, "authorized_keys")
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("root's SSH keys: %w", err)
	}
	if err := atomicfile.Write(path, MergeAuthorizedKeys(old, keys), 0o600); err != nil {
		return fmt.Errorf("root's SSH keys: %w", err)
	}
	return nil
}

func waitLink(ctx context.Context, sysNet, name string, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		if _, err := os.Stat(filepath.Join(sysNet, name)); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			var have []string
			entries, _ := os.ReadDir(sysNet)
			for _, e := range entries {
				have = append(have, e.Name())
			}
			return fmt.Errorf("interface %s did not appear in %s (this machine has: %s); fix bootstrap's interface names in the site file", name, wait, strings.Join(have, ", "))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}
