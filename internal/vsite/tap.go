package vsite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
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
// nsPath: a tap belongs to the namespace it was made in. The thread goes
// back to its own namespace after (or is thrown away if it cannot).
func openTapIn(nsPath, name string) (*os.File, error) {
	type result struct {
		f   *os.File
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		own, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			ch <- result{err: err}
			runtime.UnlockOSThread()
			return
		}
		defer own.Close()
		target, err := os.Open(nsPath)
		if err != nil {
			ch <- result{err: err}
			runtime.UnlockOSThread()
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{err: fmt.Errorf("entering the namespace: %w", err)}
			runtime.UnlockOSThread()
			return
		}
		f, err := openTap(name)
		if unix.Setns(int(own.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread() // else the thread dies with the goroutine
		}
		ch <- result{f, err}
	}()
	r := <-ch
	return r.f, r.err
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
