// Package datadisk prepares the appliance's data disk: the disk the site
// names, or else the first empty disk, formatted once and found by its
// label and mounted on every later boot. Folders that must survive a
// reboot (kubelet's, kubeadm's) are bind-mounted onto it.
//
// Sealed (Options.Seal), the disk is a LUKS2 volume carrying the label,
// with an ext4 file system inside; its key is sealed to the TPM (package
// luks) or kept on the boot stick (package stickkey). Otherwise the disk
// is ext4 itself. A disk found is unlocked the way its header says, and
// mounted.
//
// A disk that is in use (mounted, partitioned, held by another device, or
// carrying a file system or partition table that is not ours) is never
// formatted unless the caller says to wipe that very disk.
package datadisk

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/bootstick/bootstick/internal/logctx"
	"github.com/bootstick/bootstick/internal/luks"
	"github.com/bootstick/bootstick/internal/stickkey"
)

// DefaultLabel is the data disk's file system label.
const DefaultLabel = "BOOTSTICK-DATA"

// MapperName is the unlocked LUKS2 volume's name (/dev/mapper/bootstick-data).
const MapperName = "bootstick-data"

// DefaultMinSize is the smallest disk taken as a data disk.
const DefaultMinSize = 512 << 20

// Options say which disk to use and where to mount it.
type Options struct {
	// Device is the disk the site names (e.g. /dev/disk/by-id/...); empty
	// means: ours found by label, else the first empty disk.
	Device string
	// Wipe formats Device even when it holds data. It has no effect
	// without Device.
	Wipe bool
	// Label is the file system label (at most 15 bytes); default DefaultLabel.
	Label string
	// Mount is where the disk is mounted, e.g. /var/lib/bootstick.
	Mount string
	// Binds are folders bind-mounted onto the disk: target path ->
	// folder under Mount, e.g. "/var/lib/kubelet" -> "kubelet".
	Binds map[string]string
	// Candidates are the disks considered for "the first empty disk", in
	// order; nil means every disk in /sys/block but loop, RAM, optical,
	// floppy, device-mapper and MD devices.
	Candidates []string
	// Exclude are devices never used (the boot medium), by path.
	Exclude []string
	// MinSize is the smallest usable disk in bytes; default DefaultMinSize.
	MinSize int64
	// Seal says where a new disk's key lives; SealNone formats it plain.
	Seal Seal
	// StickKey is the boot stick's key slot: where SealStick keeps a new
	// disk's key, and where a disk sealed so finds it. Nil when the boot
	// medium has none; NoStickKey then says why.
	StickKey   *stickkey.Slot
	NoStickKey string
	// KeyDir is a folder on a tmpfs where a key lives while cryptsetup
	// needs it.
	KeyDir string
}

// Seal is where a data disk's key lives.
type Seal string

const (
	// SealNone is a plain ext4 disk.
	SealNone Seal = ""
	// SealTPM is a LUKS2 volume whose key is sealed to the TPM.
	SealTPM Seal = "tpm"
	// SealStick is a LUKS2 volume whose key is on the boot stick.
	SealStick Seal = "stick"
)

func (o *Options) defaults() error {
	if o.Label == "" {
		o.Label = DefaultLabel
	}
	if len(o.Label) > 15 {
		return fmt.Errorf("data disk label %q: longer than 15 bytes", o.Label)
	}
	if o.MinSize == 0 {
		o.MinSize = DefaultMinSize
	}
	if !filepath.IsAbs(o.Mount) {
		return fmt.Errorf("data disk mount point %q: not an absolute path", o.Mount)
	}
	return nil
}

// pendingLabel marks a disk while it is being formatted: a disk with it
// was ours when a format was interrupted, and may be formatted again.
func pendingLabel(label string) string {
	l := "~" + label
	if len(l) > 16 {
		l = l[:16]
	}
	return l
}

// Result says what Prepare did.
type Result struct {
	Device    string
	Formatted bool
	// Seal is where the disk's key lives (SealNone: a plain disk).
	Seal Seal
}

// Attach mounts our data disk if one exists (found by its label) and sets
// up the bind mounts. It formats nothing. found is false when there is no
// disk of ours; then nothing is mounted.
func Attach(ctx context.Context, o Options) (dev string, found bool, err error) {
	if err := o.defaults(); err != nil {
		return "", false, err
	}
	dev, found, _, err = attach(ctx, o)
	return dev, found, err
}

// attach is Attach on checked options; it also says where the disk's key
// lives.
func attach(ctx context.Context, o Options) (dev string, found bool, seal Seal, err error) {
	dev, err = FindByLabel(ctx, o.Label)
	if err != nil || dev == "" {
		return "", false, SealNone, err
	}
	fs, seal, err := unlock(ctx, dev, o)
	if err != nil {
		return dev, true, seal, err
	}
	if err := mountAll(ctx, fs, o); err != nil {
		return dev, true, seal, err
	}
	return dev, true, seal, nil
}

// Prepare makes sure the data disk is formatted, mounted at o.Mount and the
// bind mounts are in place. It is safe to run again at any point.
func Prepare(ctx context.Context, o Options) (Result, error) {
	if err := o.defaults(); err != nil {
		return Result{}, err
	}
	if dev, found, seal, err := attach(ctx, o); err != nil {
		return Result{Device: dev}, err
	} else if found {
		if o.Device != "" {
			if want, err := filepath.EvalSymlinks(o.Device); err == nil && want != dev {
				logctx.From(ctx).Warn("the site names one data disk, but another carries our label; using the labelled one",
					"site", o.Device, "labelled", dev)
			}
		}
		return Result{Device: dev, Seal: seal}, nil
	}
	// A volume open while no disk carries our label is an interrupted
	// format's, in this boot: lock it, so the disk counts as free.
	if err := luks.Close(ctx, MapperName); err != nil {
		return Result{}, err
	}
	dev, err := choose(ctx, o)
	if err != nil {
		return Result{}, err
	}
	logctx.From(ctx).Info("formatting the data disk", "device", dev, "label", o.Label)
	fs, err := format(ctx, dev, o)
	if err != nil {
		return Result{Device: dev, Seal: o.Seal}, err
	}
	res := Result{Device: dev, Formatted: true, Seal: o.Seal}
	if err := mountAll(ctx, fs, o); err != nil {
		return res, err
	}
	return res, nil
}
