package firstboot

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/bootstick/bootstick/internal/logctx"
	"github.com/bootstick/bootstick/internal/luks"
	"github.com/bootstick/bootstick/internal/mounts"
	"github.com/bootstick/bootstick/internal/stickkey"

	"github.com/bootstick/bootstick/internal/datadisk"
	"github.com/bootstick/bootstick/internal/pipeline"
)

// dataDiskStep prepares the data disk (appliance mode): the site's
// bootstrap.dataDisk, --data-disk, ours by label, or the first empty disk;
// formatted once and mounted, with kubelet's, kubeadm's and our own
// folders bound onto it. On a machine with a TPM 2.0 a new disk is a
// LUKS2 volume whose key is sealed to it (package luks). Host mode only
// makes the data folder.
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
			log := logctx.From(ctx)
			start := time.Now()
			res, err := datadisk.Prepare(ctx, o)
			if err != nil {
				return err
			}
			if res.Formatted {
				log.Info("formatted the data disk", "device", res.Device, "label", datadisk.DefaultLabel, "key", sealWords[res.Seal], "took", time.Since(start).Round(time.Millisecond))
				switch res.Seal {
				case datadisk.SealStick:
					log.Warn("this machine has no TPM 2.0 (" + luks.TPMDevice + "): the data disk's key is on the boot stick, which is now the disk's key; keep the stick apart from the server when it is not booting it")
				case datadisk.SealNone:
					log.Warn("this machine has no TPM 2.0 ("+luks.TPMDevice+"), and the boot medium cannot keep a key: the data disk is NOT encrypted, and whoever holds it reads the cluster's keys", "why", o.NoStickKey)
				}
			}
			keepHostKeys(ctx, n.paths)
			return os.MkdirAll(n.paths.State, 0o755)
		},
	}
}

// sealWords say where a data disk's key lives.
var sealWords = map[datadisk.Seal]string{
	datadisk.SealTPM:   "sealed to the TPM",
	datadisk.SealStick: "on the boot stick",
	datadisk.SealNone:  "none: not encrypted",
}

// diskOptions find and mount the data disk, never the boot medium. A new
// disk's key is sealed to the TPM; without one it is kept in the boot
// stick's key slot (a dd'd stick); without that (a CD) there is none.
func diskOptions(o runOptions, p paths) datadisk.Options {
	d := datadisk.Options{Mount: p.Data, Binds: binds, Wipe: o.wipeDataDisk, KeyDir: p.Run}
	writable := false
	if src := datadisk.SourceOf("/run/live/medium"); src != "" {
		disk := datadisk.DiskOf(src)
		d.Exclude = []string{disk, src}
		if slot, err := stickkey.Find(disk); err != nil {
			d.NoStickKey = err.Error()
		} else {
			d.StickKey, writable = &slot, slot.Writable()
			if !writable {
				d.NoStickKey = slot.Disk + " is read-only"
			}
		}
	} else {
		d.NoStickKey = "no boot medium at /run/live/medium"
	}
	switch {
	case luks.HasTPM():
		d.Seal = datadisk.SealTPM
	case writable:
		d.Seal = datadisk.SealStick
	}
	return d
}

// dataDiskStatus is the data disk as status shows it, and whether it is a
// problem: empty where nothing is mounted at the data folder (host mode,
// or before the data-disk step).
func dataDiskStatus(p paths) (string, bool) {
	m, ok := mounts.At(p.Data)
	if !ok || m.Source == "" || !isLiveSystem() {
		return "", false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if m.Source != luks.Mapper(datadisk.MapperName) {
		return fmt.Sprintf("NOT ENCRYPTED: %s is plain ext4 (when it was formatted, this machine had no TPM 2.0 to seal a key to, and its boot medium could not keep one), and whoever holds it reads the cluster's keys and the BMC passwords", m.Source), true
	}
	dev, err := datadisk.FindByLabel(ctx, datadisk.DefaultLabel)
	if err != nil || dev == "" {
		return fmt.Sprintf("LUKS2 (%s), but its disk is not found by its label %s: %v", m.Source, datadisk.DefaultLabel, err), true
	}
	h, err := luks.ReadHeader(ctx, dev)
	switch {
	case err != nil:
		return fmt.Sprintf("LUKS2 on %s: %v", dev, err), true
	case h.TPM2PCRs == nil:
		return fmt.Sprintf("LUKS2 on %s, its key on the boot stick (this machine has no TPM 2.0): the stick is the disk's key, so keep it apart from the server when it is not booting it", dev), false
	case !h.SealedOnly():
		return fmt.Sprintf("LUKS2 on %s, its key sealed to this machine's TPM 2.0 (PCR %s); other keyslots open it too (%s)", dev, pcrList(h.TPM2PCRs), strings.Join(h.Keyslots, ", ")), false
	}
	return fmt.Sprintf("LUKS2 on %s, its only key sealed to this machine's TPM 2.0 (PCR %s)", dev, pcrList(h.TPM2PCRs)), false
}

func pcrList(pcrs []int) string {
	s := make([]string, len(pcrs))
	for i, p := range pcrs {
		s[i] = fmt.Sprint(p)
	}
	return strings.Join(s, "+")
}
