package firstboot

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/bootstick/bootstick/internal/kindcluster"
	"github.com/bootstick/bootstick/internal/pipeline"
	"github.com/bootstick/bootstick/internal/registry"
)

// kindKubeconfig is the kind cluster's kubeconfig (0600), on the data
// folder: kind mode never touches the user's ~/.kube/config.
func (p paths) kindKubeconfig() string { return filepath.Join(p.Data, "kind", "kubeconfig") }

// kubeconfig is the kubeconfig of the mode: kind's own, or kubeadm's
// admin.conf.
func (e *env) kubeconfig() string {
	if e.opts.mode == "kind" {
		return e.paths.kindKubeconfig()
	}
	return adminConf
}

// kindSteps run the same pipeline against a kind cluster: the engine and
// kind replace the data disk, registry, containerd and kubeadm steps, and
// the bundle's images are loaded into the nodes instead of served.
func (e *env) kindSteps() []pipeline.Step {
	return []pipeline.Step{
		step{name: "preflight", run: e.kindPreflight},
		step{name: "bundle", run: e.locateBundle},
		step{name: "kind-cluster", run: e.kindCluster},
		step{name: "kind-images", run: e.kindImages},
		step{name: "manifests", run: e.manifests},
		step{name: "site", run: e.site},
		step{name: "done", run: e.kindReady},
	}
}

func init() {
	stepHints["kind-cluster"] = "`docker ps` (or podman ps) shows what kind left; rerunning reuses the cluster"
	stepHints["kind-images"] = "rerunning loads the images again"
}

// findEngine detects the container engine (again, on a resumed run).
func (e *env) findEngine(ctx context.Context) (kindcluster.Engine, error) {
	if e.engine != nil {
		return *e.engine, nil
	}
	eng, err := kindcluster.Detect(ctx)
	if err != nil {
		return eng, err
	}
	e.engine = &eng
	return eng, nil
}

func (e *env) kindPreflight(ctx context.Context, pc *pipeline.Context) error {
	eng, err := e.findEngine(ctx)
	if err != nil {
		return err
	}
	pc.Log.Info("kind mode", "engine", eng.Name, "cluster", e.opts.kindName)
	return nil
}

// nodeImage is --kind-node-image, else kindest/node at the Kubernetes
// version of the bundle's kube-apiserver.
func (e *env) nodeImage() (string, error) {
	if e.opts.kindNodeImage != "" {
		return e.opts.kindNodeImage, nil
	}
	api, err := e.findImage("kube-apiserver")
	if err != nil {
		return "", fmt.Errorf("choosing the kind node image: %w; pass --kind-node-image", err)
	}
	return "kindest/node:" + api.Tag, nil
}

func (e *env) kindClusterOf(ctx context.Context, pc *pipeline.Context) (*kindcluster.Cluster, string, error) {
	eng, err := e.findEngine(ctx)
	if err != nil {
		return nil, "", err
	}
	if err := e.findBundle(ctx); err != nil {
		return nil, "", err
	}
	img, err := e.nodeImage()
	if err != nil {
		return nil, "", err
	}
	c := kindcluster.New(eng, kindcluster.Options{Name: e.opts.kindName, NodeImage: img,
		Kubeconfig: e.paths.kindKubeconfig(), Wait: e.opts.timeout, Log: pc.Log})
	return c, img, nil
}

func (e *env) kindCluster(ctx context.Context, pc *pipeline.Context) error {
	c, img, err := e.kindClusterOf(ctx, pc)
	if err != nil {
		return err
	}
	exists, err := c.Exists()
	if err != nil {
		return err
	}
	if !exists {
		loaded, err := kindcluster.EnsureNodeImage(ctx, *e.engine, e.layout, img)
		if err != nil {
			return err
		}
		if loaded {
			pc.Log.Info("loaded the node image from the bundle", "image", img, "engine", e.engine.Name)
		}
	}
	start := time.Now()
	created, err := c.Ensure()
	if err != nil {
		return err
	}
	if created {
		pc.Log.Info(fmt.Sprintf("created kind cluster %s in %s", e.opts.kindName, time.Since(start).Round(100*time.Millisecond)),
			"image", img, "kubeconfig", e.paths.kindKubeconfig())
	} else {
		pc.Log.Info("reusing kind cluster "+e.opts.kindName, "kubeconfig", e.paths.kindKubeconfig())
	}
	return nil
}

// kindImages loads every image of the bundle (but the node image) into
// every node, so that pods start with nothing pulled. It sends an OCI
// archive, not a docker archive: containerd rebuilds the manifest of a
// docker archive (a new digest), and the manifests name some images by
// digest.
func (e *env) kindImages(ctx context.Context, pc *pipeline.Context) error {
	c, img, err := e.kindClusterOf(ctx, pc)
	if err != nil {
		return err
	}
	node, err := registry.ParseRef(img)
	if err != nil {
		return fmt.Errorf("--kind-node-image: %w", err)
	}
	refs := slices.DeleteFunc(slices.Clone(e.images), func(r string) bool { return r == node.String() })
	start := time.Now()
	err = c.LoadImages(ctx, func(w io.Writer) error { return kindcluster.WriteOCIArchive(e.layout, refs, w) })
	if err != nil {
		return err
	}
	pc.Log.Info(fmt.Sprintf("loaded %d images of the bundle into the nodes in %s", len(refs), time.Since(start).Round(100*time.Millisecond)))
	return nil
}

// kindReady waits until every node is Ready.
func (e *env) kindReady(ctx context.Context, pc *pipeline.Context) error {
	cfg, err := restConfigFrom(e.kubeconfig())
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("kind cluster %s: %w", e.opts.kindName, err)
	}
	var notReady []string
	err = waitFor(ctx, e.opts.timeout, "the nodes of kind cluster "+e.opts.kindName, func() (bool, error) {
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil || len(nodes.Items) == 0 {
			return false, nil
		}
		notReady = notReady[:0]
		for _, n := range nodes.Items {
			if !nodeReady(n) {
				notReady = append(notReady, n.Name)
			}
		}
		return len(notReady) == 0, nil
	})
	if err != nil && len(notReady) > 0 {
		return fmt.Errorf("%w (not ready: %v)", err, notReady)
	}
	return err
}

func nodeReady(n corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
