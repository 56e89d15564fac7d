package firstboot

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/bootstick/bootstick/internal/atomicfile"
	"github.com/bootstick/bootstick/internal/logctx"
	"github.com/bootstick/bootstick/internal/pipeline"
	"github.com/bootstick/bootstick/internal/siteclock"
	"github.com/bootstick/bootstick/internal/supervise"
)

// clockService is the site's chronyd.
const clockService = "bootstick-chronyd"

// clockConf is the site's chronyd's configuration.
func (p paths) clockConf() string { return filepath.Join(p.Etc, "chrony.conf") }

// clockPID is its pid file, firstboot's own (a developer's host may run
// a chronyd of its own, with Debian's).
func (p paths) clockPID() string { return filepath.Join(p.Run, "chronyd.pid") }

// clockStep makes this machine the site's clock (internal/siteclock):
// chronyd follows the site's NTP servers (bootstrap.ntp) or stands as the
// site's clock, and answers the provisioning network, whose hosts take
// their time from it. On the booted stick it sets this machine's clock
// first, before the certificates of the kubeadm step are made; in host
// mode it never touches the host's clock (chronyd -x). Without a site
// there are no hosts to serve.
func clockStep(n *node) pipeline.Step {
	return pipeline.Step{
		Name: "clock",
		Hint: "see /run/bootstick/services/" + clockService + ".log; check bootstrap.ntp in the site (firstboot validate)",
		Done: func(ctx context.Context, pc *pipeline.Context) (bool, error) {
			cfg, ok, err := clockConfig(n)
			if err != nil || !ok {
				return !ok && err == nil, err
			}
			return clockServes(ctx, n, cfg), nil
		},
		Run: func(ctx context.Context, pc *pipeline.Context) error {
			cfg, ok, err := clockConfig(n)
			if err != nil || !ok {
				return err
			}
			// The booted stick must serve its hosts' time; in host mode a
			// developer's machine may lack chrony, or the site's
			// provisioning address, and the hosts then keep their own
			// clocks.
			chronyd, err := exec.LookPath("chronyd")
			if err != nil {
				err = fmt.Errorf("the site's hosts take their time from this machine, and chronyd is not installed (Debian package chrony): %w", err)
			} else if !localIP(cfg.Listen.AsSlice()) {
				err = fmt.Errorf("the provisioning address %s is not on any interface of this machine, so the site's clock cannot serve it", cfg.Listen)
			}
			if err != nil && cfg.SetClock {
				return err
			}
			if err != nil {
				logctx.From(ctx).Warn("the site's hosts get no time from this machine", "err", err)
				return nil
			}
			conf, err := cfg.Render()
			if err != nil {
				return err
			}
			for _, f := range []string{n.paths.clockConf(), cfg.PIDFile} {
				if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
					return err
				}
			}
			if err := atomicfile.Write(n.paths.clockConf(), conf, 0o644); err != nil {
				return err
			}
			cmd := []string{chronyd, "-d", "-f", n.paths.clockConf()}
			if !cfg.SetClock {
				cmd = append(cmd, "-x")
			}
			if err := n.services.Start(ctx, supervise.Service{Name: clockService, Description: "bootstick: the site's clock", Command: cmd}); err != nil {
				return err
			}
			if err := waitUntil(ctx, time.Minute, "the site's clock at "+cfg.Listen.String(), func(ctx context.Context) bool { return clockServes(ctx, n, cfg) }); err != nil {
				return err
			}
			a, err := clockSource(ctx, cfg)
			if err != nil {
				return err
			}
			src := "this machine's own clock: the site names no NTP server, or none answers yet"
			if a.Stratum < 10 {
				src = "the site's NTP server " + a.RefID
			}
			logctx.From(ctx).Info("the site's clock serves the provisioning network", "address", cfg.Listen.String(), "stratum", a.Stratum,
				"source", src, "sets this machine's clock", cfg.SetClock)
			return nil
		},
	}
}

// clockUpstreamWait bounds how long the booted stick waits for the site's
// NTP servers to set its clock before it goes on with its own.
const clockUpstreamWait = time.Minute

// clockSource is the site's chronyd's answer, once it follows the site's
// NTP servers; on the booted stick, with servers named, it waits up to
// clockUpstreamWait for that (chronyd steps the clock then), and warns
// when the site's servers never answer.
func clockSource(ctx context.Context, cfg siteclock.Config) (siteclock.Answer, error) {
	a, err := siteclock.Query(ctx, cfg.Addr())
	if err != nil || !cfg.SetClock || len(cfg.Servers) == 0 {
		return a, err
	}
	err = waitUntil(ctx, clockUpstreamWait, "the site's NTP servers", func(ctx context.Context) bool {
		a, err = siteclock.Query(ctx, cfg.Addr())
		return err == nil && a.Stratum < 10
	})
	if ctx.Err() != nil {
		return a, ctx.Err()
	}
	if err != nil {
		logctx.From(ctx).Warn("the site's NTP servers did not answer: the site runs on this machine's clock until they do", "servers", cfg.Servers, "waited", clockUpstreamWait.String())
	}
	return a, nil
}

// clockConfig is the site's chronyd's configuration; false without a site.
func clockConfig(n *node) (siteclock.Config, bool, error) {
	s, err := n.site()
	if err != nil || s == nil {
		return siteclock.Config{}, false, err
	}
	pr, err := netip.ParsePrefix(s.Bootstrap.Provisioning.Address)
	if err != nil {
		return siteclock.Config{}, false, fmt.Errorf("bootstrap.provisioning.address %q: %w", s.Bootstrap.Provisioning.Address, err)
	}
	return siteclock.Config{Servers: s.Bootstrap.NTP, Listen: pr.Addr(), Allow: pr.Masked(), PIDFile: n.paths.clockPID(),
		SetClock: n.opts.mode == "appliance"}, true, nil
}

// clockServes reports whether the site's chronyd runs and answers,
// synchronized, on the provisioning address.
func clockServes(ctx context.Context, n *node, cfg siteclock.Config) bool {
	if active, err := n.services.Active(ctx, clockService); err != nil || !active {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	a, err := siteclock.Query(ctx, cfg.Addr())
	return err == nil && a.Synchronized
}
