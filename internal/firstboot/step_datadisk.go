package firstboot

import (
	"context"
	"os"

	"github.com/bootstick/bootstick/internal/logctx"

	"github.com/bootstick/bootstick/internal/datadisk"
	"github.com/bootstick/bootstick/internal/pipeline"
)

// dataDiskStep prepares the data disk (appliance mode): the site's
// bootstrap.dataDisk, --data-disk, ours by label, or the first empty disk;
// formatted once and mounted, with kubelet's, kubeadm's and our own
// folders bound onto it. Host mode only makes the data folder.
func dataDiskStep(n *node) pipeline.Step {
	return pipeline.Step{
		Name: "data-disk",
		Hint: "name the disk with --data-disk (or the site's bootstrap.dataDisk); --wipe-data-disk erases one that holds data",
		Run: func(ctx context.Context, pc *pipeline.Context) error {
			if n.opts.mode != "appliance" {
				return os.MkdirAll(n.paths.Data, 0o755)
			}
			o := diskOptions(n.opts, n.paths)
			o.Device = n.opts.dataDisk
			if o.Device == "" {
				s, err := n.site()
				if err != nil {
					return err
				}
				if s != nil {
					o.Device = s.Bootstrap.DataDisk
				}
			}
			res, err := datadisk.Prepare(ctx, o)
			if err != nil {
				return err
			}
			if res.Formatted {
				logctx.From(ctx).Info("formatted the data disk", "device", res.Device, "label", datadisk.DefaultLabel)
			}
			keepHostKeys(ctx, n.paths)
			return os.MkdirAll(n.paths.State, 0o755)
		},
	}
}

// diskOptions find and mount the data disk, never the boot medium.
func diskOptions(o runOptions, p paths) datadisk.Options {
	d := datadisk.Options{Mount: p.Data, Binds: binds, Wipe: o.wipeDataDisk}
	if src := datadisk.SourceOf("/run/live/medium"); src != "" {
		d.Exclude = []string{datadisk.DiskOf(src), src}
	}
	return d
}
