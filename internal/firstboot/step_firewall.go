package firstboot

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/bootstick/bootstick/internal/atomicfile"
	"github.com/bootstick/bootstick/internal/firewall"
	"github.com/bootstick/bootstick/internal/logctx"
	"github.com/bootstick/bootstick/internal/pipeline"
)

// firewallRules is the loaded ruleset, as nft read it.
func (p paths) firewallRules() string { return filepath.Join(p.Run, "firewall.nft") }

// firewallStep loads the appliance's firewall (internal/firewall) before
// anything serves the provisioning network: that network reaches only
// what the hosts need of this machine (and what the site's
// bootstrap.provisioning.open adds), and nothing is forwarded between it
// and any other. The booted stick must have it. In host mode a developer's
// machine may lack nft: the run goes on, and says what stays open.
// Without a site there is no provisioning network to guard.
func firewallStep(n *node) pipeline.Step {
	return pipeline.Step{
		Name: "firewall",
		Hint: "see " + n.paths.firewallRules() + "; check bootstrap.provisioning.interface and open in the site (firstboot validate)",
		Done: func(ctx context.Context, pc *pipeline.Context) (bool, error) {
			rules, ok, err := firewallConfig(n)
			if err != nil || !ok {
				return !ok && err == nil, err
			}
			nft, err := firewall.Find()
			if err != nil {
				return false, nil
			}
			loaded, err := os.ReadFile(n.paths.firewallRules())
			return err == nil && bytes.Equal(loaded, rules) && firewall.Loaded(ctx, nft), nil
		},
		Run: func(ctx context.Context, pc *pipeline.Context) error {
			rules, ok, err := firewallConfig(n)
			if err != nil || !ok {
				return err
			}
			nft, err := firewall.Find()
			if errors.Is(err, firewall.ErrNoNft) && n.opts.mode == "host" {
				logctx.From(ctx).Warn("no firewall: the provisioning network can reach every port of this machine (its API server, kubelet, etcd and sshd among them)", "err", err)
				return nil
			}
			if err != nil {
				return err
			}
			if err := os.MkdirAll(filepath.Dir(n.paths.firewallRules()), 0o755); err != nil {
				return err
			}
			if err := atomicfile.Write(n.paths.firewallRules(), rules, 0o644); err != nil {
				return err
			}
			if err := firewall.Apply(ctx, nft, n.paths.firewallRules()); err != nil {
				return err
			}
			b := n.early.Bootstrap
			open := "none"
			if len(b.Provisioning.Open) > 0 {
				open = strings.Join(b.Provisioning.Open, ", ")
			}
			logctx.From(ctx).Info("the firewall guards the provisioning network: it reaches DHCP, TFTP, NTP, Ironic and the registry only, and nothing is forwarded from or into it",
				"interface", b.Provisioning.Interface, "opened by the site", open, "rules", n.paths.firewallRules())
			return nil
		},
	}
}

// firewallConfig renders the site's ruleset; ok is false without a site.
func firewallConfig(n *node) ([]byte, bool, error) {
	s, err := n.site()
	if err != nil || s == nil {
		return nil, false, err
	}
	b := s.Bootstrap
	c := firewall.Config{Provisioning: b.Provisioning.Interface, Open: b.Provisioning.Open}
	if b.External != nil {
		c.External = b.External.Interface
	}
	for _, d := range b.DNS {
		a, err := netip.ParseAddr(d)
		if err != nil {
			return nil, false, fmt.Errorf("the site's bootstrap.dns %q: %w", d, err)
		}
		c.DNS = append(c.DNS, a)
	}
	rules, err := c.Render()
	if err != nil {
		return nil, false, fmt.Errorf("the site's bootstrap.provisioning: %w", err)
	}
	return rules, true, nil
}

// firewallStatus is the firewall as status shows it: "" before the
// firewall step wrote its rules.
func firewallStatus(p paths) string {
	if _, err := os.Stat(p.firewallRules()); err != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	nft, err := firewall.Find()
	if err != nil || !firewall.Loaded(ctx, nft) {
		return fmt.Sprintf("NOT LOADED: the rules of %s are not in the kernel (nft list table inet %s shows none); run firstboot again", p.firewallRules(), firewall.Table)
	}
	return fmt.Sprintf("loaded: the provisioning network reaches DHCP, TFTP, NTP, the registry and Ironic only, and what the site opens (nft list table inet %s; %s)", firewall.Table, p.firewallRules())
}
