package firstboot

import (
	"context"

	"github.com/bootstick/bootstick/internal/kube"
	"github.com/bootstick/bootstick/internal/pipeline"
)

// readyStep waits until the node is Ready, kube-proxy and CoreDNS are
// rolled out and every kube-system pod is Ready: in every mode, against
// the mode's cluster.
func readyStep(n *node) pipeline.Step {
	return pipeline.Step{
		Name: "done",
		Hint: "kubectl --kubeconfig " + n.kubeconfig + " get pods -A shows which pods are not ready",
		Run: func(ctx context.Context, pc *pipeline.Context) error {
			c, err := kube.Load(n.kubeconfig)
			if err != nil {
				return err
			}
			t := n.opts.timeout
			if err := c.WaitNodesReady(ctx, t); err != nil {
				return err
			}
			// The addons' pods may not exist yet: wait for their rollouts
			// first, then for every kube-system pod.
			if err := c.WaitDaemonSet(ctx, "kube-system", "kube-proxy", t); err != nil {
				return err
			}
			if err := c.WaitDeployment(ctx, "kube-system", "coredns", t); err != nil {
				return err
			}
			return c.WaitPodsReady(ctx, "kube-system", t)
		},
	}
}
