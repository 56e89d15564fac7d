package firstboot

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bootstick/bootstick/internal/pipeline"
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
	}
	for _, c := range cases {
		t.Run(c.mode+"/"+c.nodeImage+c.wantErr, func(t *testing.T) {
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
