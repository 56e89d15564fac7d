package dhcpprobe

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// DiscoverIn is Discover from inside the network namespace at nsPath
// (e.g. /run/netns/NAME), on a thread of its own: the socket belongs to
// that namespace, and nothing is sent from any other.
func DiscoverIn(ctx context.Context, nsPath, iface string, mac net.HardwareAddr, wait time.Duration) (Result, error) {
	type answer struct {
		r   Result
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		runtime.LockOSThread()
		// The thread is never unlocked: it dies with the goroutine, and
		// its namespace with it.
		ns, err := os.Open(nsPath)
		if err != nil {
			ch <- answer{err: fmt.Errorf("DHCP probe: %w", err)}
			return
		}
		defer ns.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- answer{err: fmt.Errorf("DHCP probe: entering %s: %w", nsPath, err)}
			return
		}
		r, err := Discover(ctx, iface, mac, wait)
		ch <- answer{r, err}
	}()
	a := <-ch
	return a.r, a.err
}
