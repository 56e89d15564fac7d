package firstboot

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/bootstick/bootstick/internal/command"
	"github.com/bootstick/bootstick/internal/dockertest"
	"github.com/bootstick/bootstick/internal/kube"
	"github.com/bootstick/bootstick/internal/pipeline"
	"github.com/bootstick/bootstick/internal/registry"
)

// TestKindModeWithoutEngine runs `firstboot run --mode kind` on a machine
// with neither docker nor podman (PATH is an empty folder): it fails in
// the preflight step, says what is missing and what to do, and records the
// failure in the state file.
func TestKindModeWithoutEngine(t *testing.T) {
	data := t.TempDir()
	t.Setenv("PATH", t.TempDir())
	code, _, errs := runCLI(t, "run", "--mode", "kind", "--bundle", testBundle(t), "--data", data)
	if code == 0 {
		t.Fatalf("exit code 0 without a container engine; stderr:\n%s", errs)
	}
	for _, want := range []string{"docker", "podman", "install docker.io or podman", "--mode host", "step preflight"} {
		if !strings.Contains(errs, want) {
			t.Errorf("stderr does not say %q:\n%s", want, errs)
		}
	}
	if strings.Contains(errs, "panic") || strings.Contains(errs, "goroutine ") {
		t.Fatalf("panicked:\n%s", errs)
	}
	st, err := pipeline.LoadState(pipeline.StatePath(defaultPaths(data).State))
	if err != nil {
		t.Fatal(err)
	}
	rec := st.Step("preflight")
	if rec == nil || rec.State != pipeline.StateFailed {
		t.Fatalf("state file: preflight is %+v, want failed", rec)
	}
	if !strings.Contains(rec.Error, "neither docker nor podman") {
		t.Errorf("state file: preflight error %q does not name the engines", rec.Error)
	}
	if b := st.Step("bundle"); b != nil && b.State != pipeline.StatePending {
		t.Errorf("state file: bundle ran after a failed preflight: %+v", b)
	}
}

// TestKindModeOptions: the steps read the cluster through the mode's
// kubeconfig, and the node image follows the bundle's Kubernetes version
// unless --kind-node-image names one.
func TestKindModeOptions(t *testing.T) {
	images := []string{"registry.k8s.io/kube-apiserver:v1.34.4", "registry.k8s.io/pause:3.10.1"}
	cases := []struct {
		mode, nodeImage string
		images          []string
		wantKubeconfig  string
		wantImage       string
		wantErr         string
	}{
		{mode: "host", images: images, wantKubeconfig: adminConf, wantImage: "kindest/node:v1.34.4"},
		{mode: "appliance", images: images, wantKubeconfig: adminConf, wantImage: "kindest/node:v1.34.4"},
		{mode: "kind", images: images, wantKubeconfig: "/data/kind/kubeconfig", wantImage: "kindest/node:v1.34.4"},
		{mode: "kind", nodeImage: "kindest/node:v1.33.1", images: images, wantKubeconfig: "/data/kind/kubeconfig", wantImage: "kindest/node:v1.33.1"},
		{mode: "kind", images: images[1:], wantKubeconfig: "/data/kind/kubeconfig", wantErr: "--kind-node-image"},
		// The toolchain's own node image, when the bundle holds it.
		{mode: "kind", images: append(images, "registry.bootstick.dev/kind-node:v1.34.4"), wantKubeconfig: "/data/kind/kubeconfig", wantImage: "registry.bootstick.dev/kind-node:v1.34.4"},
		{mode: "kind", images: append(images, "registry.bootstick.dev/kind-node:v1.33.1"), wantKubeconfig: "/data/kind/kubeconfig", wantImage: "kindest/node:v1.34.4"},
	}
	for _, c := range cases {
		t.Run(c.mode+"/"+c.nodeImage+c.wantErr+c.wantImage, func(t *testing.T) {
			n := discover(context.Background(), runOptions{mode: c.mode, kindNodeImage: c.nodeImage, bundle: "/no/bundle"}, defaultPaths("/data"), nil)
			n.bundle.images = c.images
			if got := n.kubeconfig; got != filepath.Clean(c.wantKubeconfig) {
				t.Errorf("kubeconfig %s, want %s", got, c.wantKubeconfig)
			}
			img, err := nodeImage(n)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("error %v, want one that says %s", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if img != c.wantImage {
				t.Errorf("node image %s, want %s", img, c.wantImage)
			}
		})
	}
}

// TestKindMode runs `firstboot run --mode kind` against a docker engine
// of the test's own (dockertest: its own roots and sockets, in a network
// namespace of its own) with the toolchain's bundle and no flag: the node
// image comes from the bundle, the cluster comes up with nothing pulled,
// firstboot's manifests apply, every pod runs and is ready, each pod's
// image is one the bundle holds, the BPA runs by the digest the bundle
// holds, and a second run does nothing.
func TestKindMode(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a docker engine and a kind cluster (root, make deps, make toolchain)")
	}
	tc := toolchainDir(t)
	layoutDir := filepath.Join(tc, "oci")
	e := dockertest.Start(t)
	bin := buildFirstboot(t)
	data := t.TempDir()
	kubeconfig := filepath.Join(data, "kind", "kubeconfig")
	run := func() (string, time.Duration, error) {
		start := time.Now()
		out, err := e.Command(bin, "run", "--mode", "kind", "--bundle", layoutDir, "--data", data).CombinedOutput()
		return string(out), time.Since(start), err
	}
	out, took, err := run()
	if err != nil {
		t.Fatalf("run --mode kind: %v\n%s\ndockerd:\n%s", err, command.Tail(out, 40), command.Tail(readText(e.Log), 15))
	}
	st, err := pipeline.LoadState(pipeline.StatePath(defaultPaths(data).State))
	if err != nil {
		t.Fatal(err)
	}
	var times strings.Builder
	for _, s := range st.Steps {
		if s.State != pipeline.StateDone {
			t.Errorf("step %s is %s after a successful run", s.Name, s.State)
		}
		fmt.Fprintf(&times, "  %-13s %6.1fs\n", s.Name, s.Duration.Seconds())
	}
	t.Logf("first run took %s:\n%s", took.Round(100*time.Millisecond), times.String())
	if !strings.Contains(out, "loaded the node image from the bundle") || !strings.Contains(out, "image="+ownNodeImage+":") {
		t.Errorf("the run did not load the bundle's own node image (%s):\n%s", ownNodeImage, command.Tail(out, 40))
	}

	// Every pod runs and is ready, on images the bundle holds.
	srv, err := registry.Open(layoutDir, registry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	held := map[string]string{} // manifest digest -> image
	for _, ref := range srv.Images() {
		if d, ok := srv.Digest(ref); ok {
			held[d] = ref
		}
	}
	kubectl := filepath.Join(tc, "bin", "kubectl")
	podsJSON, err := e.Command(kubectl, "--kubeconfig", kubeconfig, "get", "pods", "-A", "-o", "json").Output()
	if err != nil {
		t.Fatalf("kubectl get pods: %v", err)
	}
	var pods corev1.PodList
	if err := json.Unmarshal(podsJSON, &pods); err != nil {
		t.Fatal(err)
	}
	bpaDigest, ok := srv.Digest("registry.bootstick.dev/bpa-operator:v0.1.0")
	if !ok {
		t.Fatal("the toolchain's bundle has no BPA image")
	}
	sawBPA := false
	namespaces := map[string]bool{}
	for _, p := range pods.Items {
		name := p.Namespace + "/" + p.Name
		namespaces[p.Namespace] = true
		if p.Status.Phase != corev1.PodRunning || !kube.PodReady(p) {
			t.Errorf("pod %s is %s (ready %v), want Running and ready", name, p.Status.Phase, kube.PodReady(p))
		}
		for _, c := range p.Status.ContainerStatuses {
			_, digest, _ := strings.Cut(c.ImageID, "@")
			if _, ok := held[digest]; !ok {
				t.Errorf("pod %s runs image %s (%s), which the bundle does not hold", name, c.Image, c.ImageID)
			}
		}
		if p.Namespace == "bpa-system" {
			sawBPA = true
			img := p.Spec.Containers[0].Image
			if !strings.HasSuffix(img, "@"+bpaDigest) {
				t.Errorf("the BPA pod names its image %s, want it by the bundle's digest %s", img, bpaDigest)
			}
			if len(p.Status.ContainerStatuses) == 0 || !strings.HasSuffix(p.Status.ContainerStatuses[0].ImageID, "@"+bpaDigest) {
				t.Errorf("the BPA pod's imageID is not the bundle's digest %s: %+v", bpaDigest, p.Status.ContainerStatuses)
			} else {
				t.Logf("the BPA pod runs %s, imageID %s", img, p.Status.ContainerStatuses[0].ImageID)
			}
		}
	}
	if !sawBPA || !namespaces["kube-system"] {
		t.Errorf("pods in namespaces %v, want kube-system and the BPA's bpa-system", namespaces)
	}

	// A second run finds every step done and changes nothing.
	out, took, err = run()
	if err != nil {
		t.Fatalf("second run: %v\n%s", err, command.Tail(out, 20))
	}
	if strings.Contains(out, "): done in") {
		t.Errorf("a run after success ran steps:\n%s", out)
	}
	t.Logf("second run took %s", took.Round(100*time.Millisecond))
}

func readText(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}
