// Package netns runs a function inside a network namespace, on a thread
// of its own, and brings that thread back to its own namespace after.
//
// A thread left in a namespace is not harmless: were it the process's
// main thread (which Go never ends, even when a locked goroutine exits on
// it), the whole process would show in that namespace (`ip netns pids`
// reads /proc/PID/ns/net, the main thread's), and whatever clears the
// namespace's processes would kill it.
package netns

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// Do runs fn on a locked thread inside the network namespace at path
// (e.g. /run/netns/NAME): what fn makes there (a tap, a listening or a
// packet socket) belongs to that namespace and stays in it. The thread
// then returns to its own namespace and is unlocked; if it cannot return,
// it stays locked and ends with the goroutine.
func Do(path string, fn func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		own, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			ch <- fmt.Errorf("entering network namespace %s: %w", path, err)
			return
		}
		defer own.Close()
		target, err := os.Open(path)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- fmt.Errorf("entering network namespace: %w", err)
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- fmt.Errorf("entering network namespace %s: %w", path, err)
			return
		}
		err = fn()
		if unix.Setns(int(own.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		ch <- err
	}()
	return <-ch
}
