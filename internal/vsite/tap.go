package vsite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/bootstick/bootstick/internal/netns"
)

// Tap makes a tap device on the site's bridge, inside the namespace, and
// returns its open file: a QEMU that runs on this machine's side (its
// other NICs on user networking) gets it as a NIC on the provisioning
// network (qemu -netdev tap,fd=N). The device goes when the file is
// closed and QEMU exits.
func (s *Site) Tap(ctx context.Context, name string) (*os.File, error) {
	if len(name) >= unix.IFNAMSIZ {
		return nil, fmt.Errorf("tap %s: name longer than %d bytes", name, unix.IFNAMSIZ-1)
	}
	f, err := openTapIn(filepath.Join("/run/netns", s.opts.Netns), name)
	if err != nil {
		return nil, fmt.Errorf("tap %s in %s: %w", name, s.opts.Netns, err)
	}
	for _, argv := range [][]string{
		{"ip", "-n", s.opts.Netns, "link", "set", name, "master", bridge},
		{"ip", "-n", s.opts.Netns, "link", "set", name, "up"},
	} {
		if _, err := run(ctx, argv...); err != nil {
			f.Close()
			return nil, fmt.Errorf("tap %s: %w", name, err)
		}
	}
	return f, nil
}

// openTapIn opens /dev/net/tun as tap name from inside the namespace at
// nsPath: a tap belongs to the namespace it was made in.
func openTapIn(nsPath, name string) (*os.File, error) {
	var f *os.File
	err := netns.Do(nsPath, func() error {
		var err error
		f, err = openTap(name)
		return err
	})
	return f, err
}

func openTap(name string) (*os.File, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("/dev/net/tun: %w", err)
	}
	var req [unix.IFNAMSIZ + 64]byte
	copy(req[:], name)
	*(*uint16)(unsafe.Pointer(&req[unix.IFNAMSIZ])) = unix.IFF_TAP | unix.IFF_NO_PI
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TUNSETIFF, uintptr(unsafe.Pointer(&req[0]))); errno != 0 {
		unix.Close(fd)
		return nil, fmt.Errorf("TUNSETIFF: %w", errno)
	}
	return os.NewFile(uintptr(fd), "/dev/net/tun:"+name), nil
}
