package firstboot

import (
	"bytes"
	"cmp"
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
	"github.com/bootstick/bootstick/internal/site"
)

// firewallRules is the loaded ruleset, as nft read it.
func (p paths) firewallRules() string { return filepath.Join(p.Run, "firewall.nft") }

// firewallStep checks and repairs the appliance's firewall
// (internal/firewall), first of the steps that touch the machine, before
// anything of firstboot's serves the provisioning network: that network
// reaches only what the hosts need of this machine (and what the site's
// bootstrap.provisioning.open adds). On the booted stick `firstboot
// network` loaded it already, before sshd started. The booted stick must
// have it. In host mode a developer's machine may lack nft: the run goes
// on, and says what stays open. Without a site there is no provisioning
// network to guard.
func firewallStep(n *node) pipeline.Step {
	return pipeline.Step{
		Name: "firewall",
		Hint: "see " + n.paths.firewallRules() + " and nft list table inet " + firewall.Table + "; check bootstrap.provisioning in the site (firstboot validate)",
		Done: func(ctx context.Context, pc *pipeline.Context) (bool, error) {
			s, err := n.site()
			if err != nil || s == nil {
				return s == nil && err == nil, err
			}
			rules, err := renderFirewall(s, n.opts.podSubnet)
			if err != nil {
				return false, err
			}
			nft, err := firewall.Find()
			if err != nil {
				return false, nil
			}
			loaded, err := os.ReadFile(n.paths.firewallRules())
			if err != nil || !bytes.Equal(loaded, rules) {
				return false, nil
			}
			ok, err := firewall.Loaded(ctx, nft)
			return ok, err
		},
		Run: func(ctx context.Context, pc *pipeline.Context) error {
			s, err := n.site()
			if err != nil || s == nil {
				return err
			}
			err = loadFirewall(ctx, s, n.opts.podSubnet, n.paths.firewallRules())
			if errors.Is(err, firewall.ErrNoNft) && n.opts.mode == "host" {
				logctx.From(ctx).Warn("no firewall: the provisioning network can reach every port of this machine (its API server, kubelet, etcd and sshd among them)", "err", err)
				return nil
			}
			return err
		},
	}
}

// renderFirewall renders the site's ruleset, with podSubnet as this
// machine's pod range ("" is the site's, else the default).
func renderFirewall(s *site.Early, podSubnet string) ([]byte, error) {
	b := s.Bootstrap
	pods, err := netip.ParsePrefix(cmp.Or(podSubnet, b.PodCIDR, site.DefaultBootstrapPodCIDR))
	if err != nil {
		return nil, fmt.Errorf("the firewall: bootstrap.podCIDR: %w", err)
	}
	c := firewall.Config{Provisioning: b.Provisioning.Interface, Open: b.Provisioning.Open, PodCIDR: pods, Hosts: s.ClusterAddresses()}
	for i, d := range b.DNS {
		a, err := netip.ParseAddr(d)
		if err != nil {
			return nil, fmt.Errorf("the firewall: bootstrap.dns[%d]: %w", i, err)
		}
		c.DNS = append(c.DNS, a)
	}
	rules, err := c.Render()
	if err != nil {
		return nil, fmt.Errorf("the firewall: bootstrap.provisioning: %w (check the site with firstboot validate)", err)
	}
	return rules, nil
}

// loadFirewall writes the site's ruleset to file and loads it.
func loadFirewall(ctx context.Context, s *site.Early, podSubnet, file string) error {
	rules, err := renderFirewall(s, podSubnet)
	if err != nil {
		return err
	}
	nft, err := firewall.Find()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	if err := atomicfile.Write(file, rules, 0o644); err != nil {
		return err
	}
	if err := firewall.Apply(ctx, nft, file); err != nil {
		return err
	}
	b := s.Bootstrap
	open := "none"
	if len(b.Provisioning.Open) > 0 {
		open = strings.Join(b.Provisioning.Open, ", ")
	}
	logctx.From(ctx).Info("the firewall guards the provisioning network: it reaches DHCP, TFTP, NTP, Ironic and the registry only, and nothing is forwarded from or into it but what the site asks for",
		"interface", b.Provisioning.Interface, "opened by the site", open, "rules", file)
	return nil
}

// firewallStatus is the firewall as status shows it, and whether it is a
// problem: "" before the firewall was loaded from its rules file.
func firewallStatus(p paths) (string, bool) {
	if _, err := os.Stat(p.firewallRules()); err != nil {
		return "", false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	nft, err := firewall.Find()
	if err != nil {
		return "", false
	}
	loaded, err := firewall.Loaded(ctx, nft)
	switch {
	case err != nil:
		return "unknown: " + err.Error(), false
	case !loaded:
		return fmt.Sprintf("NOT LOADED: the rules of %s are not in the kernel (nft list table inet %s shows none): the provisioning network reaches every port of this machine; restart firstboot (systemctl restart firstboot on the stick)", p.firewallRules(), firewall.Table), true
	}
	return fmt.Sprintf("loaded: the provisioning network reaches DHCP, TFTP, NTP, the registry and Ironic only, and what the site opens (nft list table inet %s; %s)", firewall.Table, p.firewallRules()), false
}
