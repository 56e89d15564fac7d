package firstboot

import (
	"slices"
	"strings"
	"testing"

	"github.com/bootstick/bootstick/internal/bpa/install"
	"github.com/bootstick/bootstick/internal/bundle"
)

// TestHostImages: from a lock with the default stick's images (its images
// and binaries, copied from a build's bundle/default.lock: that file is
// made by the build and is not in a fresh clone), the hosts are given the
// Kubernetes release's images, the sandbox's and flannel's, each with the
// lock's digest, and none of the appliance's own (Ironic, BMO, the BPA);
// a lock image without a digest is refused, naming it.
func TestHostImages(t *testing.T) {
	lock, err := bundle.ReadLock("testdata/hosts.lock")
	if err != nil || lock == nil {
		t.Fatalf("reading testdata/hosts.lock: lock %v, error %v", lock != nil, err)
	}
	c := &install.Config{PauseImage: "registry.k8s.io/pause:3.10.1", Plugins: map[string]install.Plugin{}}
	for name, image := range lock.Plugins() {
		c.Plugins[name] = install.Plugin{Image: image}
	}
	got, err := hostImages(lock, "registry.k8s.io", c)
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
	if _, err := hostImages(lock, "registry.k8s.io", c); err == nil || !strings.Contains(err.Error(), "registry.k8s.io/etcd:") || !strings.Contains(err.Error(), "no digest") {
		t.Errorf("a lock image with no digest: %v", err)
	}
}

// TestHostPulls reads lines of a real access log (TestAppClusterDHCPClock's
// registry, node-0 at 172.22.0.20, the appliance at 127.0.0.1): node-0's
// fetches by digest count as such, a request by tag (with the digest it
// was served) counts as by tag, and another machine's requests and failed
// ones do not count.
func TestHostPulls(t *testing.T) {
	const log = `{"time":"2026-11-28T04:30:52.688168537Z","method":"HEAD","ns":"registry.k8s.io","repo":"kube-apiserver","kind":"manifest","reference":"v1.34.4","digest":"sha256:d2c599d80db7c44400ae8eb51517ce217c9a59fe83f935101d09e5d179e6b33f","status":200,"bytes":0,"remote":"127.0.0.1:36246"}
{"time":"2026-11-28T04:39:02.269116158Z","method":"HEAD","ns":"docker.io","repo":"flannel/flannel","kind":"manifest","digest":"sha256:39f9e7fca0e42e67d3d9775a354fd77205b2aa7d184c2e15cefc51b6c56ce323","status":200,"bytes":0,"remote":"172.22.0.20:49904"}
{"time":"2026-11-28T04:39:02.578426651Z","method":"GET","ns":"docker.io","repo":"flannel/flannel","kind":"manifest","digest":"sha256:39f9e7fca0e42e67d3d9775a354fd77205b2aa7d184c2e15cefc51b6c56ce323","status":200,"bytes":718,"remote":"172.22.0.20:49908"}
{"time":"2026-11-28T04:39:49.000000000Z","method":"GET","ns":"registry.k8s.io","repo":"kube-apiserver","kind":"manifest","reference":"v1.34.4","digest":"sha256:d2c599d80db7c44400ae8eb51517ce217c9a59fe83f935101d09e5d179e6b33f","status":200,"bytes":1000,"remote":"172.22.0.20:49950"}
{"time":"2026-11-28T04:39:50.000000000Z","method":"GET","ns":"registry.k8s.io","repo":"etcd","kind":"manifest","reference":"3.6.5-0","status":404,"bytes":0,"remote":"172.22.0.20:49951"}
{"time":"2026-11-28T04:39:51.000000000Z","method":"GET","ns":"registry.k8s.io","repo":"etcd","kind":"blob","digest":"sha256:70ece18a9969b497ae4361f846658c5f6dc21880b77ded6ce8e1060caead7c3e","status":200,"bytes":10,"remote":"172.22.0.20:49952"}
`
	byDigest, byTag, err := hostPulls(strings.NewReader(log), "172.22.0.20")
	if err != nil {
		t.Fatal(err)
	}
	if len(byDigest) != 1 || !byDigest["docker.io/flannel/flannel@sha256:39f9e7fca0e42e67d3d9775a354fd77205b2aa7d184c2e15cefc51b6c56ce323"] {
		t.Errorf("by digest: %v, want flannel's alone", byDigest)
	}
	if !slices.Equal(byTag, []string{"GET registry.k8s.io/kube-apiserver:v1.34.4"}) {
		t.Errorf("by tag: %v, want node-0's GET of kube-apiserver:v1.34.4 alone", byTag)
	}
	if _, _, err := hostPulls(strings.NewReader("{not json\n"), "172.22.0.20"); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("a broken line: %v", err)
	}
}
