package firstboot

import (
	"context"
	"fmt"
	"time"

	"github.com/bootstick/bootstick/internal/logctx"

	"github.com/bootstick/bootstick/internal/hoststate"
	"github.com/bootstick/bootstick/internal/kube"
	"github.com/bootstick/bootstick/internal/pipeline"
	"github.com/bootstick/bootstick/internal/sitestep"
	"github.com/bootstick/bootstick/internal/status"
)

// hostErrorSettle is how long a host's error must hold before the site
// step counts the host as failed and ends (the operator keeps retrying;
// status goes on following). After a failure the operator waits about a
// minute before it tries again.
var hostErrorSettle = 60 * time.Second

// siteStep applies the site's objects (BMC Secrets, BareMetalHosts, user
// data, the Provisioning) and reports each host's state.
func siteStep(n *node) pipeline.Step {
	return pipeline.Step{
		Name: "site",
		Hint: "check the site with `firstboot validate --site FILE`; rerunning applies it again and creates nothing twice",
		Run: func(ctx context.Context, pc *pipeline.Context) error {
			if n.sitePath == "" {
				logctx.From(ctx).Info("no site (no --site, none in the bundle); nothing to provision")
				return sitestep.WriteHosts(n.paths.hostsFile(), []sitestep.Host{})
			}
			images, err := bundledImages(n.bundle.dir)
			if err != nil {
				return err
			}
			c, err := kube.Load(n.kubeconfig)
			if err != nil {
				return err
			}
			identity := n.opts.ageIdentity
			if identity == "" {
				identity = n.paths.ageIdentity()
			}
			early, err := n.site()
			if err != nil {
				return err
			}
			inst, err := installConfig(n, early.Bootstrap.Provisioning.Address)
			if err != nil {
				return err
			}
			if inst == nil {
				logctx.From(ctx).Warn("the bundle has no bundle.lock (a bare toolchain layout): it carries no packages, so the BPA will not install the hosts")
			}
			hosts, pacer, err := sitestep.Apply(ctx, c, sitestep.Options{Site: n.sitePath, Images: images, KeyDir: n.paths.sshKeyDir(),
				AgeIdentity: identity, Install: inst})
			if err != nil {
				return err
			}
			if err := sitestep.WriteHosts(n.paths.hostsFile(), hosts); err != nil {
				return err
			}
			// Follow every host to its end: provisioned, or an error that
			// holds. A rerun (after a crash or a reboot) applies the same
			// objects again, which creates nothing twice, and goes on
			// following.
			states, err := sitestep.Follow(ctx, c, sitestep.FollowOptions{
				NoOperator: 5 * time.Minute, ErrorSettle: hostErrorSettle, Registering: sitestep.RegisteringLimit, Pacer: pacer,
				Progress: func(count string) { pc.Progress("site", count) },
				OnError:  recordHostError(ctx, n.paths.hostsFile(), hosts),
			})
			if err != nil {
				return err
			}
			reportHosts(ctx, states)
			return nil
		},
	}
}

// recordHostError keeps each host's last error in the hosts file for
// status (the operator clears its message each time it tries again).
func recordHostError(ctx context.Context, hostsFile string, hosts []sitestep.Host) func(hoststate.Host) {
	return func(h hoststate.Host) {
		for i := range hosts {
			if hosts[i].Name == h.Name {
				hosts[i].LastErrorType, hosts[i].LastError, hosts[i].LastErrorAt = h.ErrorType, h.Error, time.Now().UTC()
			}
		}
		if err := sitestep.WriteHosts(hostsFile, hosts); err != nil {
			logctx.From(ctx).Warn("recording a host's error for status", "err", err)
		}
	}
}

// reportHosts logs how the hosts Follow followed ended: each failed host
// with its reason, those without a state yet or still held, and how many
// are provisioned, which it returns as a line.
func reportHosts(ctx context.Context, states []hoststate.Host) string {
	log := logctx.From(ctx)
	pending, held, provisioned := 0, 0, 0
	for _, s := range states {
		switch {
		case s.State == "" && s.Paused == sitestep.HoldValue:
			held++
		case s.State == "":
			pending++
		case s.Error != "":
			log.Warn("host failed; the baremetal-operator keeps retrying, firstboot status follows it", "name", s.Name,
				"state", s.State, "reason", status.HostReason(s.ErrorType, s.Error))
		case s.State == "provisioned":
			provisioned++
		}
	}
	if pending > 0 {
		log.Info(fmt.Sprintf("%d of %d hosts have no provisioning state yet (the baremetal-operator sets it); firstboot status shows them", pending, len(states)))
	}
	if held > 0 {
		log.Info(fmt.Sprintf("%d of %d hosts still held back by bootstrap.provisioningLimit: no host at work got done; firstboot status shows them", held, len(states)))
	}
	line := fmt.Sprintf("%d of %d hosts provisioned", provisioned, len(states))
	log.Info(line)
	return line
}
