package datadisk

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/bootstick/bootstick/internal/command"
)

// Usage is what Inspect found on a disk.
type Usage struct {
	Device     string
	Size       int64
	ReadOnly   bool
	Mounted    bool
	Partitions []string
	Holders    []string
	// FSType and PTType are the signatures blkid found ("" for none);
	// Label is the file system's label.
	FSType, PTType, Label string
	// Pending is set when the disk carries our interrupted-format label.
	Pending bool
}

// Empty reports whether the disk holds nothing: no partitions, no holders,
// no signature (or only our own interrupted format).
func (u Usage) Empty() bool {
	if u.Pending {
		return len(u.Partitions) == 0 && len(u.Holders) == 0
	}
	return len(u.Partitions) == 0 && len(u.Holders) == 0 && u.FSType == "" && u.PTType == ""
}

// Why says in words why a disk is not empty.
func (u Usage) Why() string {
	var r []string
	if u.Mounted {
		r = append(r, "mounted")
	}
	if u.ReadOnly {
		r = append(r, "read-only")
	}
	if len(u.Partitions) > 0 {
		r = append(r, "partitions "+strings.Join(u.Partitions, ", "))
	}
	if len(u.Holders) > 0 {
		r = append(r, "held by "+strings.Join(u.Holders, ", "))
	}
	if u.PTType != "" {
		r = append(r, "a "+u.PTType+" partition table")
	}
	if u.FSType != "" && !u.Pending {
		s := "a " + u.FSType + " file system"
		if u.Label != "" {
			s += fmt.Sprintf(" labelled %q", u.Label)
		}
		r = append(r, s)
	}
	if len(r) == 0 {
		return "empty"
	}
	return strings.Join(r, ", ")
}

// Inspect looks at a whole disk: its partitions, holders, mounts and
// signatures.
func Inspect(ctx context.Context, dev, label string) (Usage, error) {
	u := Usage{Device: dev}
	var st syscall.Stat_t
	if err := syscall.Stat(dev, &st); err != nil {
		return u, fmt.Errorf("%s: %w", dev, err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFBLK {
		return u, fmt.Errorf("%s: not a block device", dev)
	}
	name := filepath.Base(dev)
	sys := filepath.Join("/sys/class/block", name)
	if _, err := os.Stat(filepath.Join(sys, "partition")); err == nil {
		return u, fmt.Errorf("%s is a partition; name the whole disk", dev)
	}
	if n, err := readInt(filepath.Join(sys, "size")); err == nil {
		u.Size = n * 512
	}
	if n, err := readInt(filepath.Join(sys, "ro")); err == nil && n == 1 {
		u.ReadOnly = true
	}
	devs := []string{devno(st.Rdev)}
	entries, _ := os.ReadDir(sys)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), name) {
			if _, err := os.Stat(filepath.Join(sys, e.Name(), "partition")); err == nil {
				u.Partitions = append(u.Partitions, e.Name())
				if d, err := os.ReadFile(filepath.Join(sys, e.Name(), "dev")); err == nil {
					devs = append(devs, strings.TrimSpace(string(d)))
				}
			}
		}
	}
	holders, _ := os.ReadDir(filepath.Join(sys, "holders"))
	for _, h := range holders {
		u.Holders = append(u.Holders, h.Name())
	}
	u.Mounted = mountedDevice(devs)
	sig, err := probe(ctx, dev)
	if err != nil {
		return u, err
	}
	u.FSType, u.PTType, u.Label = sig["TYPE"], sig["PTTYPE"], sig["LABEL"]
	u.Pending = label != "" && u.Label == pendingLabel(label)
	return u, nil
}

// probe runs blkid in low-level probing mode (no cache): the signatures on
// the device itself.
func probe(ctx context.Context, dev string) (map[string]string, error) {
	out, err := command.Output(ctx, command.Options{}, "blkid", "-p", "-o", "export", dev)
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 2 {
		return map[string]string{}, nil // nothing found
	}
	if err != nil {
		return nil, fmt.Errorf("probing %s: %w", dev, err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			m[k] = v
		}
	}
	return m, nil
}

// FindByLabel returns the device whose file system carries label, or "".
// Two such devices are an error.
func FindByLabel(ctx context.Context, label string) (string, error) {
	out, err := command.Output(ctx, command.Options{}, "blkid", "-c", "/dev/null", "-o", "device", "-t", "LABEL="+label)
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 2 {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("looking for the data disk (label %s): %w", label, err)
	}
	devs := strings.Fields(string(out))
	switch len(devs) {
	case 0:
		return "", nil
	case 1:
		return devs[0], nil
	}
	return "", fmt.Errorf("several disks are labelled %s (%s): remove or relabel all but one", label, strings.Join(devs, ", "))
}

// DiskOf returns the whole disk a device belongs to (a partition's
// parent), or the device itself.
func DiskOf(dev string) string {
	r, err := filepath.EvalSymlinks(dev)
	if err != nil {
		return dev
	}
	name := filepath.Base(r)
	if _, err := os.Stat(filepath.Join("/sys/class/block", name, "partition")); err == nil {
		if link, err := filepath.EvalSymlinks(filepath.Join("/sys/class/block", name)); err == nil {
			return "/dev/" + filepath.Base(filepath.Dir(link))
		}
	}
	return r
}

func readInt(p string) (int64, error) {
	data, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
}

func devno(rdev uint64) string { return fmt.Sprintf("%d:%d", unix.Major(rdev), unix.Minor(rdev)) }
