// Package usbwrite writes an ISO raw to a USB stick: it refuses a device
// that is mounted, not removable or too small (the first two unless
// forced), writes, syncs, drops the device's cached pages and reads the
// image back to compare it.
package usbwrite

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/bootstick/bootstick/internal/mounts"

	"golang.org/x/sys/unix"

	"github.com/bootstick/bootstick/internal/progress"
)

// Device is a block device as the kernel describes it.
type Device struct {
	Path      string
	Name      string // e.g. sdb
	Size      int64
	Removable bool
	// Mounts are mount points of the device or its partitions.
	Mounts []string
}

// Describe reads a block device's size, removability and mounts.
func Describe(path string) (Device, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return Device{}, fmt.Errorf("device %s: %w", path, err)
	}
	var st unix.Stat_t
	if err := unix.Stat(real, &st); err != nil {
		return Device{}, fmt.Errorf("device %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return Device{}, fmt.Errorf("%s is not a block device: give the whole disk, such as /dev/sdX", path)
	}
	name := filepath.Base(real)
	sys := filepath.Join("/sys/class/block", name)
	if _, err := os.Stat(filepath.Join(sys, "partition")); err == nil {
		return Device{}, fmt.Errorf("%s is a partition: give the whole disk it is on", path)
	}
	d := Device{Path: real, Name: name}
	if s, err := readInt(filepath.Join(sys, "size")); err == nil {
		d.Size = s * 512
	} else {
		return Device{}, fmt.Errorf("device %s: size: %w", path, err)
	}
	if r, err := readInt(filepath.Join(sys, "removable")); err == nil {
		d.Removable = r == 1
	}
	devs := map[string]bool{fmt.Sprintf("%d:%d", unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev))): true}
	parts, _ := filepath.Glob(filepath.Join(sys, name+"*", "dev"))
	for _, p := range parts {
		if b, err := os.ReadFile(p); err == nil {
			devs[strings.TrimSpace(string(b))] = true
		}
	}
	list, err := mounts.List()
	if err != nil {
		return Device{}, err
	}
	for _, m := range list {
		if devs[m.Device] {
			d.Mounts = append(d.Mounts, m.Point)
		}
	}
	if sw, err := os.ReadFile("/proc/swaps"); err == nil {
		for _, line := range strings.Split(string(sw), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) > 0 && (f[0] == real || strings.HasPrefix(f[0], real)) {
				d.Mounts = append(d.Mounts, "swap "+f[0])
			}
		}
	}
	return d, nil
}

func readInt(p string) (int64, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// Options say what to write where.
type Options struct {
	Image, Device string
	// Force writes to a mounted or non-removable device.
	Force    bool
	Progress progress.Progress
}

// Check says why the device must not be written, or nil.
func Check(d Device, imageSize int64, force bool) error {
	var probs []string
	if d.Size < imageSize {
		// Not even --force: the image would be cut short.
		return fmt.Errorf("%s is %.1f MB, smaller than the %.1f MB image: use a larger stick", d.Path, float64(d.Size)/1e6, float64(imageSize)/1e6)
	}
	if len(d.Mounts) > 0 {
		probs = append(probs, fmt.Sprintf("it is in use (mounted at %s): unmount it first", strings.Join(d.Mounts, ", ")))
	}
	if !d.Removable {
		probs = append(probs, "it is not a removable device (is it a system disk?)")
	}
	if len(probs) > 0 && !force {
		return fmt.Errorf("refusing to write %s: %s; add --force if you are sure", d.Path, strings.Join(probs, "; "))
	}
	return nil
}

// Write writes the image to the device, syncs and verifies it.
func Write(ctx context.Context, o Options) error {
	p := o.Progress
	if p == nil {
		p = progress.Nop()
	}
	img, err := os.Open(o.Image)
	if err != nil {
		return fmt.Errorf("reading image: %w", err)
	}
	defer img.Close()
	fi, err := img.Stat()
	if err != nil {
		return err
	}
	d, err := Describe(o.Device)
	if err != nil {
		return err
	}
	if err := Check(d, fi.Size(), o.Force); err != nil {
		return err
	}
	flags := os.O_WRONLY
	if len(d.Mounts) == 0 {
		// The kernel refuses O_EXCL on a block device that is in use.
		flags |= unix.O_EXCL
	}
	dev, err := os.OpenFile(d.Path, flags, 0)
	if err != nil {
		return fmt.Errorf("opening %s: %w", d.Path, err)
	}
	defer dev.Close()

	p.Start("writing "+d.Path, fi.Size())
	want := sha256.New()
	_, err = copyCtx(ctx, io.MultiWriter(dev, want), img, p)
	p.Done()
	if err != nil {
		return fmt.Errorf("writing %s: %w", d.Path, err)
	}
	if err := dev.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", d.Path, err)
	}
	// Drop the cached pages so that the read-back reads the medium.
	_ = unix.IoctlSetInt(int(dev.Fd()), unix.BLKFLSBUF, 0)
	_ = unix.Fadvise(int(dev.Fd()), 0, 0, unix.FADV_DONTNEED)

	rd, err := os.Open(d.Path)
	if err != nil {
		return fmt.Errorf("reading back %s: %w", d.Path, err)
	}
	defer rd.Close()
	_ = unix.Fadvise(int(rd.Fd()), 0, 0, unix.FADV_DONTNEED)
	p.Start("verifying "+d.Path, fi.Size())
	got := sha256.New()
	_, err = copyCtx(ctx, got, io.LimitReader(rd, fi.Size()), p)
	p.Done()
	if err != nil {
		return fmt.Errorf("reading back %s: %w", d.Path, err)
	}
	if string(got.Sum(nil)) != string(want.Sum(nil)) {
		return fmt.Errorf("%s does not read back what was written: the stick may be faulty or fake-capacity", d.Path)
	}
	return nil
}

func copyCtx(ctx context.Context, w io.Writer, r io.Reader, p progress.Progress) (int64, error) {
	buf := make([]byte, 4<<20)
	var n int64
	for {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		k, err := r.Read(buf)
		if k > 0 {
			if _, werr := w.Write(buf[:k]); werr != nil {
				return n, werr
			}
			n += int64(k)
			p.Add(int64(k))
		}
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}
