package firstboot

import (
	"slices"
	"strings"
	"testing"

	"github.com/bootstick/bootstick/internal/bpa/install"
	"github.com/bootstick/bootstick/internal/bundle"
)

// TestHostImages: from the default stick's lock, the hosts are given the
// Kubernetes release's images, the sandbox's and flannel's, each with the
// lock's digest, and none of the appliance's own (Ironic, BMO, the BPA);
// a lock image without a digest is refused, naming it.
func TestHostImages(t *testing.T) {
	lock, err := bundle.ReadLock("../../bundle/default.lock")
	if err != nil || lock == nil {
		t.Fatalf("reading the default lock: %v", err)
	}
	c := &install.Config{PauseImage: "registry.k8s.io/pause:3.10.1", Plugins: map[string]install.Plugin{}}
	for name, image := range lock.Plugins() {
		c.Plugins[name] = install.Plugin{Image: image}
	}
	got, err := hostImages(lock, c)
	if err != nil {
		t.Fatal(err)
	}
	digests := map[string]string{}
	for _, im := range lock.Images {
		digests[im.Ref] = string(im.Digest)
	}
	var names []string
	for _, im := range got {
		names = append(names, im.Name)
		if im.Digest == "" || im.Digest != digests[im.Name] {
			t.Errorf("%s: digest %q, the lock has %q", im.Name, im.Digest, digests[im.Name])
		}
	}
	for _, want := range []string{"docker.io/flannel/flannel:", "registry.k8s.io/kube-apiserver:", "registry.k8s.io/kube-controller-manager:",
		"registry.k8s.io/kube-scheduler:", "registry.k8s.io/kube-proxy:", "registry.k8s.io/etcd:", "registry.k8s.io/coredns/coredns:", "registry.k8s.io/pause:3.10.1"} {
		if !slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, want) }) {
			t.Errorf("the hosts' images %v lack %s", names, want)
		}
	}
	for _, n := range names {
		if strings.HasPrefix(n, "registry.bootstick.dev/") {
			t.Errorf("the hosts are given the appliance's own image %s", n)
		}
	}
	t.Logf("the hosts pull %d images by digest: %s", len(got), strings.Join(names, ", "))

	for i, im := range lock.Images {
		if strings.Contains(im.Ref, "/etcd:") {
			lock.Images[i].Digest = ""
		}
	}
	if _, err := hostImages(lock, c); err == nil || !strings.Contains(err.Error(), "registry.k8s.io/etcd:") || !strings.Contains(err.Error(), "no digest") {
		t.Errorf("a lock image with no digest: %v", err)
	}
}
