package firstboot

import (
	"context"
	"time"

	"github.com/bootstick/bootstick/internal/containerd"
	"github.com/bootstick/bootstick/internal/pipeline"
	"github.com/bootstick/bootstick/internal/supervise"
)

// containerdStep starts firstboot's own containerd (its own socket, root
// and state), with every registry of the bundle resolving to ours.
func containerdStep(n *node) pipeline.Step {
	return pipeline.Step{
		Name: "containerd",
		Hint: "see /run/bootstick/services/bootstick-containerd.log",
		Done: func(ctx context.Context, pc *pipeline.Context) (bool, error) {
			active, err := n.services.Active(ctx, containerd.ServiceName)
			if err != nil || !active {
				return false, err
			}
			return containerd.WaitReady(ctx, n.paths.containerd().Address, 2*time.Second) == nil, nil
		},
		Run: func(ctx context.Context, pc *pipeline.Context) error {
			pause, err := n.bundle.findImage("pause")
			if err != nil {
				return err
			}
			restrict, err := containerd.NeedsRestrictOOMScoreAdj()
			if err != nil {
				return err
			}
			c := n.paths.containerd()
			c.SandboxImage = pause.String()
			c.RestrictOOMScoreAdj = restrict
			c.SystemdCgroup = supervise.SystemdIsPID1()
			hosts, err := containerd.HostsFiles(n.bundle.registries, []string{registryURL(n)})
			if err != nil {
				return err
			}
			if err := containerd.WriteFiles(n.paths.containerdConfig(), c, hosts); err != nil {
				return err
			}
			bin, err := n.findBin("containerd")
			if err != nil {
				return err
			}
			if err := n.services.Start(ctx, containerd.Service(bin, n.paths.containerdConfig())); err != nil {
				return err
			}
			return containerd.WaitReady(ctx, c.Address, 60*time.Second)
		},
	}
}
