package datadisk

import (
	"context"
	"fmt"
	"time"

	"github.com/bootstick/bootstick/internal/command"
	"github.com/bootstick/bootstick/internal/logctx"
	"github.com/bootstick/bootstick/internal/luks"
)

// unlock returns the device the file system is on, and where its key
// lives: dev itself for a plain disk, or the LUKS2 volume on it unlocked
// with the TPM or the stick's key, as its header says.
func unlock(ctx context.Context, dev string, o Options) (string, Seal, error) {
	sig, err := probe(ctx, dev)
	if err != nil {
		return "", SealNone, err
	}
	if sig["TYPE"] != "crypto_LUKS" {
		return dev, SealNone, nil
	}
	h, err := luks.ReadHeader(ctx, dev)
	if err != nil {
		return "", SealTPM, err
	}
	seal := SealStick
	if h.TPM2PCRs != nil {
		seal = SealTPM
	}
	if luks.IsOpen(MapperName) {
		return luks.Mapper(MapperName), seal, nil
	}
	start := time.Now()
	var fs string
	if seal == SealTPM {
		fs, err = luks.Open(ctx, dev, MapperName)
	} else {
		fs, err = openWithStickKey(ctx, dev, o)
	}
	if err != nil {
		return "", seal, err
	}
	how := map[Seal]string{SealTPM: "unsealed the data disk's key with the TPM and unlocked it", SealStick: "unlocked the data disk with the key on the boot stick"}[seal]
	logctx.From(ctx).Info(how, "device", dev, "took", time.Since(start).Round(time.Millisecond))
	return fs, seal, nil
}

func openWithStickKey(ctx context.Context, dev string, o Options) (string, error) {
	if o.StickKey == nil {
		return "", fmt.Errorf("the data disk %s keeps its key on the stick that formatted it (no TPM sealed it), and this boot medium has no key slot (%s): boot from that stick", dev, o.NoStickKey)
	}
	key, err := o.StickKey.Load()
	if err != nil {
		return "", err
	}
	if key == nil {
		return "", fmt.Errorf("the data disk %s keeps its key on the stick that formatted it (no TPM sealed it), and this stick's key slot is blank: boot from that stick", dev)
	}
	return luks.OpenWithKey(ctx, dev, MapperName, key)
}

// format formats dev and returns the device its file system is on. The
// final label is set only once everything else is done: a disk killed
// mid-format carries the pending label, and is formatted again.
func format(ctx context.Context, dev string, o Options) (string, error) {
	run := func(argv ...string) error {
		if _, err := command.Run(ctx, command.Options{}, argv...); err != nil {
			return fmt.Errorf("formatting %s: %w", dev, err)
		}
		return nil
	}
	if o.Wipe && o.Device != "" {
		if err := run("wipefs", "-a", dev); err != nil {
			return "", err
		}
	}
	mkfs := []string{"mkfs.ext4", "-F", "-q", "-E", "lazy_itable_init=1,lazy_journal_init=1"}
	if o.Seal == SealNone {
		if err := run(append(mkfs, "-L", pendingLabel(o.Label), dev)...); err != nil {
			return "", err
		}
		return dev, run("e2label", dev, o.Label)
	}
	key, err := newKey(o)
	if err != nil {
		return "", err
	}
	defer clear(key)
	if err := luks.Format(ctx, dev, pendingLabel(o.Label), o.KeyDir, key, o.Seal == SealTPM); err != nil {
		return "", err
	}
	// Unlocking at once the way every later boot will proves the seal
	// before anything is written inside.
	fs, _, err := unlock(ctx, dev, o)
	if err != nil {
		return "", err
	}
	if err := run(append(mkfs, fs)...); err != nil {
		return "", err
	}
	return fs, luks.SetLabel(ctx, dev, o.Label)
}

// newKey is a new disk's key: random, and for SealStick the one on the
// stick (kept there first, so a format cut short uses it again; a stick
// that formatted another disk already keeps its key).
func newKey(o Options) ([]byte, error) {
	if o.Seal != SealStick {
		return luks.NewKey()
	}
	if o.StickKey == nil {
		return nil, fmt.Errorf("keeping the data disk's key on the stick: the boot medium has no key slot (%s)", o.NoStickKey)
	}
	key, err := o.StickKey.Load()
	if err != nil || key != nil {
		return key, err
	}
	if key, err = luks.NewKey(); err != nil {
		return nil, err
	}
	return key, o.StickKey.Store(key)
}
