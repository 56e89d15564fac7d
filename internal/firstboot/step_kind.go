package firstboot

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/bootstick/bootstick/internal/logctx"
	"github.com/bootstick/bootstick/internal/ociarchive"

	"github.com/bootstick/bootstick/internal/kindcluster"
	"github.com/bootstick/bootstick/internal/pipeline"
	"github.com/bootstick/bootstick/internal/registry"
)

// kindPreflightStep reports the container engine discovery found.
func kindPreflightStep(n *node) pipeline.Step {
	return pipeline.Step{
		Name: "preflight",
		Hint: "install and start docker.io or podman (`docker info` must answer), or use --mode host",
		Run: func(ctx context.Context, pc *pipeline.Context) error {
			if n.engineErr != nil {
				return n.engineErr
			}
			logctx.From(ctx).Info("kind mode", "engine", n.engine.Name, "cluster", n.opts.kindName)
			return nil
		},
	}
}

// ownNodeImage is the kind node image the toolchain builds
// (images/recipes.yaml), tagged with its Kubernetes version.
const ownNodeImage = "registry.bootstick.dev/kind-node"

// nodeImage is --kind-node-image; else the bundle's own node image at the
// Kubernetes version of its kube-apiserver, when the bundle holds it; else
// kindest/node at that version (which the engine must have).
func nodeImage(n *node) (string, error) {
	if n.opts.kindNodeImage != "" {
		return n.opts.kindNodeImage, nil
	}
	api, err := n.bundle.findImage("kube-apiserver")
	if err != nil {
		return "", fmt.Errorf("choosing the kind node image: %w; pass --kind-node-image", err)
	}
	if own := ownNodeImage + ":" + api.Tag; slices.Contains(n.bundle.images, own) {
		return own, nil
	}
	return "kindest/node:" + api.Tag, nil
}

func kindCluster(ctx context.Context, n *node) (*kindcluster.Cluster, string, error) {
	if n.engineErr != nil {
		return nil, "", n.engineErr
	}
	img, err := nodeImage(n)
	if err != nil {
		return nil, "", err
	}
	c := kindcluster.New(n.engine, kindcluster.Options{Name: n.opts.kindName, NodeImage: img,
		Kubeconfig: n.paths.kindKubeconfig(), Wait: n.opts.timeout, Log: logctx.From(ctx)})
	return c, img, nil
}

// kindClusterStep creates the kind cluster, or reuses it, with the node
// image from the bundle or the engine (never pulled).
func kindClusterStep(n *node) pipeline.Step {
	return pipeline.Step{
		Name: "kind-cluster",
		Hint: "`docker ps` (or podman ps) shows what kind left; rerunning reuses the cluster",
		Run: func(ctx context.Context, pc *pipeline.Context) error {
			c, img, err := kindCluster(ctx, n)
			if err != nil {
				return err
			}
			exists, err := c.Exists()
			if err != nil {
				return err
			}
			if !exists {
				loaded, err := kindcluster.EnsureNodeImage(ctx, n.engine, n.bundle.layout, img)
				if err != nil {
					return err
				}
				if loaded {
					logctx.From(ctx).Info("loaded the node image from the bundle", "image", img, "engine", n.engine.Name)
				}
			}
			start := time.Now()
			created, err := c.Ensure()
			if err != nil {
				return err
			}
			if created {
				logctx.From(ctx).Info(fmt.Sprintf("created kind cluster %s in %s", n.opts.kindName, time.Since(start).Round(100*time.Millisecond)),
					"image", img, "kubeconfig", n.paths.kindKubeconfig())
			} else {
				logctx.From(ctx).Info("reusing kind cluster "+n.opts.kindName, "kubeconfig", n.paths.kindKubeconfig())
			}
			return nil
		},
	}
}

// kindImagesStep loads every image of the bundle (but the node image) into
// every node, so that pods start with nothing pulled. It sends an OCI
// archive, not a docker archive: containerd rebuilds the manifest of a
// docker archive (a new digest), and the manifests name some images by
// digest.
func kindImagesStep(n *node) pipeline.Step {
	return pipeline.Step{
		Name: "kind-images",
		Hint: "rerunning loads the images again",
		Run: func(ctx context.Context, pc *pipeline.Context) error {
			c, img, err := kindCluster(ctx, n)
			if err != nil {
				return err
			}
			node, err := registry.ParseRef(img)
			if err != nil {
				return fmt.Errorf("--kind-node-image: %w", err)
			}
			refs := slices.DeleteFunc(slices.Clone(n.bundle.images), func(r string) bool { return r == node.String() })
			start := time.Now()
			err = c.LoadImages(ctx, func(w io.Writer) error { return ociarchive.Write(n.bundle.layout, refs, w) })
			if err != nil {
				return err
			}
			logctx.From(ctx).Info(fmt.Sprintf("loaded %d images of the bundle into the nodes in %s", len(refs), time.Since(start).Round(100*time.Millisecond)))
			return nil
		},
	}
}
