package vsite

import (
	"net"

	"github.com/bootstick/bootstick/internal/netns"
)

// listenIn listens on TCP address addr inside the namespace at nsPath.
// Connections to it are accepted (and served) by any thread.
func listenIn(nsPath, addr string) (net.Listener, error) {
	var ln net.Listener
	err := netns.Do(nsPath, func() error {
		var err error
		ln, err = net.Listen("tcp", addr)
		return err
	})
	return ln, err
}
