package kindcluster

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"sigs.k8s.io/kind/pkg/cluster"
	"sigs.k8s.io/kind/pkg/cluster/nodeutils"
	kindlog "sigs.k8s.io/kind/pkg/log"
)

// Options describe the cluster.
type Options struct {
	Name       string        // the kind cluster's name
	NodeImage  string        // kindest/node:vX.Y.Z
	Kubeconfig string        // where its kubeconfig is written (0600)
	Wait       time.Duration // how long creation waits for the control plane
	Log        *slog.Logger
}

// Cluster is one kind cluster driven through an engine.
type Cluster struct {
	opts     Options
	provider *cluster.Provider
}

// New returns the cluster o names, on engine e.
func New(e Engine, o Options) *Cluster {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return &Cluster{opts: o, provider: cluster.NewProvider(e.option, cluster.ProviderWithLogger(logger{o.Log}))}
}

// Exists reports whether the engine runs a kind cluster of this name.
func (c *Cluster) Exists() (bool, error) {
	names, err := c.provider.List()
	if err != nil {
		return false, fmt.Errorf("listing kind clusters: %w", err)
	}
	return slices.Contains(names, c.opts.Name), nil
}

// Ensure creates the cluster, or reuses it when it is there, and writes
// its kubeconfig to Options.Kubeconfig. It reports whether it created it.
func (c *Cluster) Ensure() (bool, error) {
	if err := os.MkdirAll(filepath.Dir(c.opts.Kubeconfig), 0o700); err != nil {
		return false, fmt.Errorf("kind cluster %s: %w", c.opts.Name, err)
	}
	exists, err := c.Exists()
	if err != nil {
		return false, err
	}
	if exists {
		if err := c.provider.ExportKubeConfig(c.opts.Name, c.opts.Kubeconfig, false); err != nil {
			return false, fmt.Errorf("writing the kubeconfig of kind cluster %s: %w", c.opts.Name, err)
		}
		return false, os.Chmod(c.opts.Kubeconfig, 0o600)
	}
	err = c.provider.Create(c.opts.Name,
		cluster.CreateWithNodeImage(c.opts.NodeImage),
		cluster.CreateWithWaitForReady(c.opts.Wait),
		cluster.CreateWithKubeconfigPath(c.opts.Kubeconfig),
		cluster.CreateWithDisplayUsage(false),
		cluster.CreateWithDisplaySalutation(false))
	if err != nil {
		return false, fmt.Errorf("creating kind cluster %s with %s: %w", c.opts.Name, c.opts.NodeImage, err)
	}
	return true, os.Chmod(c.opts.Kubeconfig, 0o600)
}

// LoadImages imports the image archive write produces into every node's
// containerd, streamed (written once per node).
func (c *Cluster) LoadImages(ctx context.Context, write func(w io.Writer) error) error {
	nodes, err := c.provider.ListInternalNodes(c.opts.Name)
	if err != nil {
		return fmt.Errorf("listing the nodes of kind cluster %s: %w", c.opts.Name, err)
	}
	if len(nodes) == 0 {
		return fmt.Errorf("kind cluster %s has no nodes", c.opts.Name)
	}
	for _, n := range nodes {
		if err := ctx.Err(); err != nil {
			return err
		}
		wErr, err := feed(write, func(r io.Reader) error { return nodeutils.LoadImageArchive(n, r) })
		if wErr != nil {
			return fmt.Errorf("loading images into node %s: %w", n.String(), wErr)
		}
		if err != nil {
			return fmt.Errorf("loading images into node %s: %w", n.String(), err)
		}
		c.opts.Log.Info("loaded images", "node", n.String())
	}
	return nil
}

// logger sends kind's messages to slog: V(0) at info, the rest at debug.
type logger struct{ l *slog.Logger }

func (g logger) Warn(m string)                        { g.l.Warn("kind: " + m) }
func (g logger) Warnf(f string, a ...any)             { g.l.Warn("kind: " + fmt.Sprintf(f, a...)) }
func (g logger) Error(m string)                       { g.l.Error("kind: " + m) }
func (g logger) Errorf(f string, a ...any)            { g.l.Error("kind: " + fmt.Sprintf(f, a...)) }
func (g logger) V(v kindlog.Level) kindlog.InfoLogger { return infoLogger{g.l, v} }

type infoLogger struct {
	l *slog.Logger
	v kindlog.Level
}

func (i infoLogger) level() slog.Level {
	if i.v <= 0 {
		return slog.LevelInfo
	}
	return slog.LevelDebug
}
func (i infoLogger) Info(m string)            { i.l.Log(context.Background(), i.level(), "kind: "+m) }
func (i infoLogger) Infof(f string, a ...any) { i.Info(fmt.Sprintf(f, a...)) }
func (i infoLogger) Enabled() bool            { return i.l.Enabled(context.Background(), i.level()) }

// EnsureNodeImage makes the node image available to the engine without
// pulling: from the bundle's OCI layout when it holds the image (loaded
// with `<engine> load`), else it must be in the engine already. It reports
// whether it loaded the image.
func EnsureNodeImage(ctx context.Context, e Engine, layoutDir, image string) (bool, error) {
	inLayout, err := HasImage(layoutDir, image)
	if err != nil {
		return false, err
	}
	if inLayout {
		err := e.LoadImage(ctx, func(w io.Writer) error { return WriteImageArchive(layoutDir, []string{image}, w) })
		if err != nil {
			return false, fmt.Errorf("loading the node image %s from the bundle: %w", image, err)
		}
		return true, nil
	}
	if e.HasImage(ctx, image) {
		return false, nil
	}
	return false, fmt.Errorf("the kind node image %s is neither in the bundle nor in %s, and kind mode pulls nothing: "+
		"`%s load` it from an archive, or pass --kind-node-image with one that %s has", image, e.Name, e.Name, e.Name)
}
