package containerd

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/bootstick/bootstick/internal/atomicfile"
)

// ServiceName is the unit (or supervised process) running our containerd.
const ServiceName = "bootstick-containerd"

// HostPaths are the folders of a containerd of our own on a host that may
// run another containerd: its own socket, root, state and hosts folder.
func HostPaths(dataDir, runDir, etcDir string) Config {
	return Config{
		Root:       filepath.Join(dataDir, "containerd"),
		State:      filepath.Join(runDir, "containerd"),
		Address:    filepath.Join(runDir, "containerd", "containerd.sock"),
		HostsDir:   filepath.Join(etcDir, "containerd", "hosts.d"),
		CNIBinDir:  "/usr/lib/cni",
		CNIConfDir: "/etc/cni/net.d",
	}
}

// WaitReady waits until the socket accepts connections.
func WaitReady(ctx context.Context, socket string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	for {
		c, err := d.DialContext(ctx, "unix", socket)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("containerd at %s not ready after %s: %w", socket, timeout, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// WriteFiles writes config.toml at configPath and the hosts.toml files under
// c.HostsDir, each atomically, and removes hosts folders of registries no
// longer named.
func WriteFiles(configPath string, c Config, hosts map[string][]byte) error {
	data, err := Render(c)
	if err != nil {
		return err
	}
	if err := writeFile(configPath, data); err != nil {
		return err
	}
	for rel, content := range hosts {
		if err := writeFile(filepath.Join(c.HostsDir, rel), content); err != nil {
			return err
		}
	}
	entries, _ := os.ReadDir(c.HostsDir)
	for _, e := range entries {
		if _, keep := hosts[filepath.Join(e.Name(), "hosts.toml")]; !keep {
			os.RemoveAll(filepath.Join(c.HostsDir, e.Name()))
		}
	}
	return nil
}

// writeFile writes one config file atomically, creating its folder.
func writeFile(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return atomicfile.Write(path, data, 0o644)
}
