package vsite

import (
	"fmt"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// inNetns runs fn on a thread of its own inside the network namespace at
// nsPath: what fn makes there (a tap, a listening socket) belongs to that
// namespace and stays in it. The thread goes back to its own namespace
// after (or is thrown away if it cannot).
func inNetns(nsPath string, fn func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		own, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			ch <- err
			return
		}
		defer own.Close()
		target, err := os.Open(nsPath)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- fmt.Errorf("entering the namespace: %w", err)
			return
		}
		err = fn()
		if unix.Setns(int(own.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread() // else the thread dies with the goroutine
		}
		ch <- err
	}()
	return <-ch
}

// listenIn listens on TCP address addr inside the namespace at nsPath.
// Connections to it are accepted (and served) by any thread.
func listenIn(nsPath, addr string) (net.Listener, error) {
	var ln net.Listener
	err := inNetns(nsPath, func() error {
		var err error
		ln, err = net.Listen("tcp", addr)
		return err
	})
	return ln, err
}
