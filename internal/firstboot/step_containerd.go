package firstboot

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/bootstick/bootstick/internal/containerd"
	"github.com/bootstick/bootstick/internal/logctx"
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
			if err := clearTornImages(ctx, n); err != nil {
				return err
			}
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
			if err := n.services.Start(ctx, supervise.Service{
				Name: containerd.ServiceName, Description: "containerd for bootstick",
				Command: []string{bin, "--config", n.paths.containerdConfig()},
			}); err != nil {
				return err
			}
			return containerd.WaitReady(ctx, c.Address, 60*time.Second)
		},
	}
}

// clearTornImages empties containerd's image store when an earlier run was
// cut off after containerd started (a power cut during kubeadm init, say).
// containerd does not sync the files it unpacks: after a cut, its
// metadata can name image layers whose files never reached the disk, and
// every container of those images dies at once (their sandboxes first).
// Nothing there is needed: every image is pulled again from the stick's
// registry, and kubelet recreates every pod.
func clearTornImages(ctx context.Context, n *node) error {
	if !interruptedAfter(n.interrupted, "containerd") {
		return nil
	}
	if active, err := n.services.Active(ctx, containerd.ServiceName); err != nil || active {
		return err // a running containerd keeps its store
	}
	root := n.paths.containerd().Root
	logctx.From(ctx).Warn("an earlier run was cut off after containerd started; its image store may hold files that never reached the disk: clearing it, every image is pulled again from the stick",
		"interrupted", n.interrupted, "store", root)
	if err := removeContents(root); err != nil {
		return fmt.Errorf("clearing containerd's image store after an interrupted run: %w", err)
	}
	return nil
}

// interruptedAfter reports whether step, the one an earlier run was inside
// when it stopped, comes after the step named after in host mode's order.
func interruptedAfter(step, after string) bool {
	if step == "" {
		return false
	}
	order := hostSteps(&node{})
	i := slices.IndexFunc(order, func(s pipeline.Step) bool { return s.Name == step })
	j := slices.IndexFunc(order, func(s pipeline.Step) bool { return s.Name == after })
	return i > j && j >= 0
}
