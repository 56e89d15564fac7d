package datadisk

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/bootstick/bootstick/internal/logctx"
	"github.com/bootstick/bootstick/internal/luks"
	"github.com/bootstick/bootstick/internal/mounts"
)

// mountAll mounts dev at o.Mount (unless something is mounted there) and
// sets up the bind mounts.
func mountAll(ctx context.Context, dev string, o Options) error {
	if err := os.MkdirAll(o.Mount, 0o755); err != nil {
		return fmt.Errorf("mounting the data disk: %w", err)
	}
	if !MountedAt(o.Mount) {
		if err := syscall.Mount(dev, o.Mount, "ext4", syscall.MS_NOATIME, ""); err != nil {
			return fmt.Errorf("mounting the data disk %s at %s: %w", dev, o.Mount, err)
		}
		logctx.From(ctx).Info("mounted the data disk", "device", dev, "at", o.Mount)
	}
	targets := make([]string, 0, len(o.Binds))
	for t := range o.Binds {
		targets = append(targets, t)
	}
	sort.Strings(targets)
	for _, t := range targets {
		src := filepath.Join(o.Mount, o.Binds[t])
		if err := os.MkdirAll(src, 0o755); err != nil {
			return fmt.Errorf("bind-mounting %s: %w", t, err)
		}
		if err := os.MkdirAll(t, 0o755); err != nil {
			return fmt.Errorf("bind-mounting %s: %w", t, err)
		}
		if MountedAt(t) {
			continue
		}
		if err := syscall.Mount(src, t, "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind-mounting %s onto %s: %w", t, src, err)
		}
	}
	return nil
}

// Detach undoes Attach: the bind mounts, then the disk.
func Detach(o Options) error {
	var errs []error
	for t := range o.Binds {
		if MountedAt(t) {
			if err := syscall.Unmount(t, 0); err != nil {
				errs = append(errs, fmt.Errorf("unmounting %s: %w", t, err))
			}
		}
	}
	if MountedAt(o.Mount) {
		if err := syscall.Unmount(o.Mount, 0); err != nil {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", o.Mount, err))
		}
	}
	if len(errs) == 0 {
		errs = append(errs, luks.Close(context.Background(), MapperName))
	}
	return errors.Join(errs...)
}

// MountedAt reports whether something is mounted at dir.
func MountedAt(dir string) bool {
	return mounts.Mounted(dir)
}

// SourceOf returns the device mounted at dir (e.g. the boot medium at
// /run/live/medium), or "".
func SourceOf(dir string) string {
	m, _ := mounts.At(dir)
	return m.Source
}

func mountedDevice(devnos []string) bool {
	list, _ := mounts.List()
	for _, m := range list {
		for _, d := range devnos {
			if m.Device == d {
				return true
			}
		}
	}
	// Swap is not in mountinfo.
	if data, err := os.ReadFile("/proc/swaps"); err == nil {
		for _, line := range strings.Split(string(data), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) == 0 {
				continue
			}
			var st syscall.Stat_t
			if syscall.Stat(f[0], &st) == nil {
				for _, d := range devnos {
					if devno(st.Rdev) == d {
						return true
					}
				}
			}
		}
	}
	return false
}
