package firstboot

import (
	"context"

	"github.com/bootstick/bootstick/internal/kube"
	"github.com/bootstick/bootstick/internal/pipeline"
)

// untaintStep lets the one node run ordinary pods: it removes the
// control-plane taint.
func untaintStep(n *node) pipeline.Step {
	return pipeline.Step{
		Name: "untaint",
		Run: func(ctx context.Context, pc *pipeline.Context) error {
			c, err := kube.Load(n.kubeconfig)
			if err != nil {
				return err
			}
			return c.Untaint(ctx)
		},
	}
}
