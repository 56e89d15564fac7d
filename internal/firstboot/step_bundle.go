package firstboot

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bootstick/bootstick/internal/logctx"

	"github.com/bootstick/bootstick/internal/pipeline"
)

// bundleStep verifies the bundle that discovery found against its lock.
// Its Done check fails while discovery could not open the bundle, so a
// bundle that went away is reported here, never by a later step.
func bundleStep(n *node) pipeline.Step {
	return pipeline.Step{
		Name: "bundle",
		Hint: "pass --bundle with the folder holding the bundle (its registry/ OCI layout), or check the boot medium",
		Done: func(ctx context.Context, pc *pipeline.Context) (bool, error) {
			return n.bundleErr == nil && pc.Record.State == pipeline.StateDone, nil
		},
		Run: func(ctx context.Context, pc *pipeline.Context) error {
			if n.bundleErr != nil {
				return n.bundleErr
			}
			start := time.Now()
			res, err := verifyBundle(ctx, n.bundle.dir)
			switch {
			case errors.Is(err, errNoLock) && n.opts.mode != "appliance":
				logctx.From(ctx).Warn("the bundle has no bundle.lock: not verified", "bundle", n.bundle.dir)
			case errors.Is(err, errNoLock):
				return fmt.Errorf("bundle %s has no bundle.lock: it cannot be verified", n.bundle.dir)
			case err != nil:
				return err
			default:
				logctx.From(ctx).Info(fmt.Sprintf("verified the bundle against its lock: %d files and %d blobs, %d MB in %s",
					res.Files, res.Blobs, res.Bytes>>20, time.Since(start).Round(100*time.Millisecond)))
			}
			return nil
		},
	}
}
