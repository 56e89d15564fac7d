package dhcpprobe

import (
	"context"
	"net"
	"time"

	"github.com/bootstick/bootstick/internal/netns"
)

// DiscoverIn is Discover from inside the network namespace at nsPath
// (e.g. /run/netns/NAME), on a thread of its own (netns.Do): the socket
// belongs to that namespace, and nothing is sent from any other.
func DiscoverIn(ctx context.Context, nsPath, iface string, mac net.HardwareAddr, wait time.Duration) (Result, error) {
	var r Result
	err := netns.Do(nsPath, func() error {
		var err error
		r, err = Discover(ctx, iface, mac, wait)
		return err
	})
	return r, err
}
