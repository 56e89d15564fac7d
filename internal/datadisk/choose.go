package datadisk

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// choose picks the disk to format.
func choose(ctx context.Context, o Options) (string, error) {
	excluded := map[string]bool{}
	for _, x := range o.Exclude {
		if r, err := filepath.EvalSymlinks(x); err == nil {
			excluded[r] = true
		}
	}
	if o.Device != "" {
		dev, err := filepath.EvalSymlinks(o.Device)
		if err != nil {
			return "", fmt.Errorf("data disk %s (bootstrap.dataDisk): %w", o.Device, err)
		}
		if excluded[dev] {
			return "", fmt.Errorf("data disk %s (bootstrap.dataDisk) is the boot medium; name another disk", o.Device)
		}
		u, err := Inspect(ctx, dev, o.Label)
		if err != nil {
			return "", err
		}
		if u.Size < o.MinSize {
			return "", fmt.Errorf("data disk %s (bootstrap.dataDisk): %d MiB, smaller than %d MiB", o.Device, u.Size>>20, o.MinSize>>20)
		}
		if u.Mounted || u.ReadOnly {
			return "", fmt.Errorf("data disk %s (bootstrap.dataDisk) is in use: %s; free it, or name another disk", o.Device, u.Why())
		}
		if !u.Empty() && !o.Wipe {
			return "", fmt.Errorf("data disk %s (bootstrap.dataDisk) is in use: %s; to erase it, wipe it yourself (wipefs -a %s) or allow firstboot to (--wipe-data-disk)",
				o.Device, u.Why(), o.Device)
		}
		return dev, nil
	}
	cands := o.Candidates
	if cands == nil {
		var err error
		if cands, err = systemDisks(); err != nil {
			return "", err
		}
	}
	var why []string
	for _, c := range cands {
		dev, err := filepath.EvalSymlinks(c)
		if err != nil {
			why = append(why, fmt.Sprintf("%s: %v", c, err))
			continue
		}
		if excluded[dev] {
			why = append(why, dev+": the boot medium")
			continue
		}
		u, err := Inspect(ctx, dev, o.Label)
		if err != nil {
			why = append(why, fmt.Sprintf("%s: %v", dev, err))
			continue
		}
		switch {
		case u.Size < o.MinSize:
			why = append(why, fmt.Sprintf("%s: %d MiB, smaller than %d MiB", dev, u.Size>>20, o.MinSize>>20))
		case !u.Empty() || u.Mounted || u.ReadOnly:
			why = append(why, fmt.Sprintf("%s: in use (%s)", dev, u.Why()))
		default:
			return dev, nil
		}
	}
	if len(why) == 0 {
		return "", errors.New("no data disk: this machine has no disk besides the boot medium; add one (it is formatted, and keeps the cluster's state)")
	}
	return "", fmt.Errorf("no empty data disk (%s); name one in the site's bootstrap.dataDisk, or wipe one", strings.Join(why, "; "))
}

// systemDisks lists the whole disks a data disk may be, in name order.
func systemDisks() ([]string, error) {
	entries, err := os.ReadDir("/sys/block")
	if err != nil {
		return nil, fmt.Errorf("listing disks: %w", err)
	}
	var out []string
	for _, e := range entries {
		n := e.Name()
		skip := false
		for _, p := range []string{"loop", "ram", "zram", "sr", "fd", "dm-", "md", "nbd", "zd"} {
			if strings.HasPrefix(n, p) {
				skip = true
			}
		}
		if !skip {
			out = append(out, "/dev/"+n)
		}
	}
	return out, nil
}
