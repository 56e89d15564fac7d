package firstboot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"

	flag "github.com/spf13/pflag"

	"github.com/bootstick/bootstick/internal/logctx"

	"github.com/bootstick/bootstick/internal/atomicfile"
	"github.com/bootstick/bootstick/internal/cli"
	"github.com/bootstick/bootstick/internal/registry"
	"github.com/bootstick/bootstick/internal/status"
)

func init() {
	register(cli.Command{
		Name:  "registry",
		Usage: "registry --layout DIR --listen ADDR[,ADDR...] [--access-log FILE] [--corrupt-file FILE]",
		Short: "serve the bundle's OCI layout read-only as a registry (run as its own service)",
		Flags: func(fs *flag.FlagSet) func(ctx context.Context, args []string) error {
			layout := fs.String("layout", "", "the OCI image layout to serve")
			listen := fs.String("listen", "127.0.0.1:5000", "comma-separated listen addresses (loopback and the provisioning address)")
			accessLog := fs.String("access-log", "", "append one JSON line per request to this file")
			corruptFile := fs.String("corrupt-file", "", "record corrupted blobs found in this JSON file (firstboot status reads it)")
			return func(ctx context.Context, args []string) error {
				if err := cli.NoArgs(args); err != nil {
					return err
				}
				if *layout == "" {
					return cli.Usagef("--layout is required")
				}
				return serveRegistry(ctx, *layout, strings.Split(*listen, ","), *accessLog, *corruptFile)
			}
		},
	})
}

func serveRegistry(ctx context.Context, layout string, addrs []string, accessLog, corruptFile string) error {
	opts := registry.Options{Log: logctx.From(ctx)}
	if accessLog != "" {
		if err := os.MkdirAll(filepath.Dir(accessLog), 0o755); err != nil {
			return err
		}
		f, err := os.OpenFile(accessLog, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("opening access log: %w", err)
		}
		defer f.Close()
		opts.AccessLog = f
	}
	if corruptFile != "" {
		var mu sync.Mutex
		opts.OnCorrupt = func(c registry.Corruption) {
			mu.Lock()
			defer mu.Unlock()
			if err := recordCorruption(corruptFile, c); err != nil {
				logctx.From(ctx).Error("recording a corrupted blob", "err", err)
			}
		}
	}
	srv, err := registry.Open(layout, opts)
	if err != nil {
		return err
	}
	n := status.NewNotifier(ctx)
	return srv.Serve(ctx, addrs, func(bound []net.Addr) {
		n.Ready(fmt.Sprintf("serving %d images on %v", len(srv.Images()), bound))
	})
}

// readCorruptions reads the corrupt-file; a missing file is none.
func readCorruptions(path string) ([]registry.Corruption, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []registry.Corruption
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return out, nil
}

func recordCorruption(path string, c registry.Corruption) error {
	list, err := readCorruptions(path)
	if err != nil {
		return err
	}
	for _, old := range list {
		if old.Digest == c.Digest {
			return nil
		}
	}
	list = append(list, c)
	data, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(path, append(data, '\n'), 0o644)
}
