package firstboot

import (
	"context"
	"fmt"
	"time"

	"github.com/bootstick/bootstick/internal/logctx"

	"github.com/bootstick/bootstick/internal/kube"
	"github.com/bootstick/bootstick/internal/pipeline"
	"github.com/bootstick/bootstick/internal/sitestep"
)

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
			hosts, err := sitestep.Apply(ctx, c, sitestep.Options{Site: n.sitePath, Images: images, KeyDir: n.paths.sshKeyDir(),
				AgeIdentity: identity})
			if err != nil {
				return err
			}
			if err := sitestep.WriteHosts(n.paths.hostsFile(), hosts); err != nil {
				return err
			}
			states, err := sitestep.Watch(ctx, c, 15*time.Second)
			if err != nil {
				return err
			}
			pending := 0
			for _, s := range states {
				if s.State == "" {
					pending++
				}
			}
			if pending > 0 {
				logctx.From(ctx).Info(fmt.Sprintf("%d of %d hosts have no provisioning state yet (the baremetal-operator sets it); firstboot status shows them", pending, len(states)))
			}
			return nil
		},
	}
}
