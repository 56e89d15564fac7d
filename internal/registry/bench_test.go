package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"golang.org/x/sync/errgroup"

	"github.com/bootstick/bootstick/internal/benchtable"
	"github.com/bootstick/bootstick/internal/cas"
)

// benchImage is one image of the layout: its name and every blob a pull
// fetches (the manifest first, then the config and the layers).
type benchImage struct {
	ref      ImageRef
	manifest descriptor
	blobs    []descriptor
}

// stickImages reads the toolchain's layout (make toolchain): every image
// the stick carries, which is every image there but kind mode's node
// image.
func stickImages(b *testing.B) (string, []benchImage) {
	dir := filepath.Join(cas.DefaultRoot(), "toolchain", "current", "oci")
	data, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		b.Fatalf("%v: run make toolchain first", err)
	}
	var idx index
	if err := json.Unmarshal(data, &idx); err != nil {
		b.Fatal(err)
	}
	var out []benchImage
	for _, d := range idx.Manifests {
		ref, err := ParseRef(d.Annotations[AnnotationImageName])
		if err != nil || strings.Contains(ref.Repository, "kind-node") {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(dir, "blobs", "sha256", strings.TrimPrefix(d.Digest, "sha256:")))
		if err != nil {
			b.Fatal(err)
		}
		var m struct {
			Config descriptor   `json:"config"`
			Layers []descriptor `json:"layers"`
		}
		if err := json.Unmarshal(raw, &m); err != nil {
			b.Fatal(err)
		}
		out = append(out, benchImage{ref: ref, manifest: d, blobs: append([]descriptor{m.Config}, m.Layers...)})
	}
	if len(out) == 0 {
		b.Fatal("the toolchain's layout names no images")
	}
	return dir, out
}

// rawRead reads every distinct blob of the images from disk, one after
// another, and returns the bytes read.
func rawRead(b *testing.B, dir string, images []benchImage) int64 {
	seen := map[string]bool{}
	var n int64
	for _, im := range images {
		for _, d := range append([]descriptor{im.manifest}, im.blobs...) {
			if seen[d.Digest] {
				continue
			}
			seen[d.Digest] = true
			f, err := os.Open(filepath.Join(dir, "blobs", "sha256", strings.TrimPrefix(d.Digest, "sha256:")))
			if err != nil {
				b.Fatal(err)
			}
			c, err := io.Copy(io.Discard, f)
			f.Close()
			if err != nil {
				b.Fatal(err)
			}
			n += c
		}
	}
	return n
}

// pullAll pulls every image from the registry at base as containerd does:
// all images at once, each its manifest and then its blobs, three at a
// time, every distinct blob once (containerd's content store fetches a
// shared layer once). It returns the bytes received.
func pullAll(ctx context.Context, base string, images []benchImage) (int64, error) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	get := func(ctx context.Context, path, accept string) (int64, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		if err != nil {
			return 0, err
		}
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		n, err := io.Copy(io.Discard, resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("GET %s: %s", path, resp.Status)
		}
		return n, err
	}
	var claimed sync.Map
	var mu sync.Mutex
	var total int64
	add := func(n int64) { mu.Lock(); total += n; mu.Unlock() }
	g, gctx := errgroup.WithContext(ctx)
	for _, im := range images {
		repo := "/v2/" + im.ref.Registry + "/" + im.ref.Repository
		g.Go(func() error {
			n, err := get(gctx, repo+"/manifests/"+im.ref.Tag, im.manifest.MediaType)
			if err != nil {
				return err
			}
			add(n)
			lg, lctx := errgroup.WithContext(gctx)
			lg.SetLimit(3)
			for _, d := range im.blobs {
				if _, dup := claimed.LoadOrStore(d.Digest, true); dup {
					continue
				}
				lg.Go(func() error {
					n, err := get(lctx, repo+"/blobs/"+d.Digest, "")
					add(n)
					return err
				})
			}
			return lg.Wait()
		})
	}
	err := g.Wait()
	return total, err
}

// distributionRegistry builds distribution/v3's registry (v3.0.0, through
// the module proxy, kept in the cache), starts it on a free port of the
// loopback with a filesystem store in a temporary folder, and pushes the
// images into it from the layout. It returns its base URL.
func distributionRegistry(b *testing.B, dir string, images []benchImage) string {
	bin := filepath.Join(cas.DefaultRoot(), "bench", "distribution-v3.0.0", "registry")
	if _, err := os.Stat(bin); err != nil {
		start := time.Now()
		cmd := exec.Command("go", "install", "github.com/distribution/distribution/v3/cmd/registry@v3.0.0")
		cmd.Env = append(os.Environ(), "GOBIN="+filepath.Dir(bin), "GOFLAGS=", "CGO_ENABLED=0", "GOWORK=off")
		cmd.Dir = b.TempDir()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("building distribution v3.0.0: %v\n%s", err, out)
		}
		b.Logf("built distribution v3.0.0 in %s", time.Since(start).Round(time.Second))
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	root := b.TempDir()
	conf := fmt.Sprintf("version: 0.1\nlog: {level: error}\nstorage: {filesystem: {rootdirectory: %s}, delete: {enabled: false}}\nhttp: {addr: %q}\n", root, addr)
	cf := filepath.Join(root, "config.yml")
	if err := os.WriteFile(cf, []byte(conf), 0o644); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", cf)
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	base := "http://" + addr
	for i := 0; ; i++ {
		if resp, err := http.Get(base + "/v2/"); err == nil {
			resp.Body.Close()
			break
		}
		if i > 300 {
			b.Fatalf("distribution does not answer on %s:\n%s", addr, logs.String())
		}
		time.Sleep(100 * time.Millisecond) // polling its port until it listens
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	for _, im := range images {
		h, err := v1.NewHash(im.manifest.Digest)
		if err != nil {
			b.Fatal(err)
		}
		img, err := p.Image(h)
		if err != nil {
			b.Fatal(err)
		}
		tag, err := name.NewTag(addr+"/"+im.ref.Registry+"/"+im.ref.Repository+":"+im.ref.Tag, name.Insecure)
		if err != nil {
			b.Fatal(err)
		}
		if err := remote.Write(tag, img); err != nil {
			b.Fatalf("pushing %s to distribution: %v", tag, err)
		}
	}
	b.Logf("pushed %d images to distribution in %s", len(images), time.Since(start).Round(time.Second))
	return base
}

// BenchmarkRegistryPull pulls every image of the stick through the
// stick's registry, concurrently as containerd does, against a raw
// sequential read of the same blobs from disk and against
// distribution/v3.0.0 serving the same images, in one run: once with the
// page cache dropped before each side (the blobs come from the disk, as on
// a stick), once warm (after an untimed warm-up round).
func BenchmarkRegistryPull(b *testing.B) {
	dir, images := stickImages(b)
	srv, err := Open(dir, Options{})
	if err != nil {
		b.Fatal(err)
	}
	ours := httptest.NewServer(srv)
	defer ours.Close()
	dist := distributionRegistry(b, dir, images)
	ctx := context.Background()
	type sides struct{ raw, ours, dist time.Duration }
	var bytes int64
	round := func(cold bool) sides {
		var t sides
		timed := func(f func() int64) time.Duration {
			if cold {
				benchtable.DropCaches(b)
			}
			start := time.Now()
			n := f()
			d := time.Since(start)
			if bytes == 0 {
				bytes = n
			} else if n != bytes {
				b.Fatalf("read %d bytes, another side %d: not the same blobs", n, bytes)
			}
			return d
		}
		pull := func(base, who string) func() int64 {
			return func() int64 {
				n, err := pullAll(ctx, base, images)
				if err != nil {
					b.Fatalf("pull from %s: %v", who, err)
				}
				return n
			}
		}
		t.raw = timed(func() int64 { return rawRead(b, dir, images) })
		t.ours = timed(pull(ours.URL, "the stick's registry"))
		t.dist = timed(pull(dist, "distribution"))
		return t
	}
	const rounds = 3
	b.ResetTimer()
	var cold, warm sides
	for range rounds {
		r := round(true)
		cold.raw, cold.ours, cold.dist = cold.raw+r.raw, cold.ours+r.ours, cold.dist+r.dist
	}
	round(false) // warm-up
	for range rounds {
		r := round(false)
		warm.raw, warm.ours, warm.dist = warm.raw+r.raw, warm.ours+r.ours, warm.dist+r.dist
	}
	b.StopTimer()
	mbps := func(d time.Duration) float64 { return float64(bytes) * rounds / 1e6 / d.Seconds() }
	what := fmt.Sprintf("%d images, %.0f MB of distinct blobs, pulled over loopback HTTP as containerd does (all images at once, 3 blobs at a time each, each distinct blob once), mean of %d rounds",
		len(images), float64(bytes)/1e6, rounds)
	for _, c := range []struct {
		name  string
		t     sides
		cache string
	}{{"cold", cold, "page cache dropped before each side (the blobs come from the disk, as on a stick)"}, {"warm", warm, "page cache warm"}} {
		g, met := benchtable.Goal(c.t.raw.Seconds()/c.t.ours.Seconds(), "higher", 0.8)
		benchtable.Record(b, benchtable.Row{Group: "registry", Name: "pull vs raw read, " + c.name,
			Ours: benchtable.Side{Name: "stick registry", Value: mbps(c.t.ours), Unit: "MB/s"},
			Ref:  benchtable.Side{Name: "sequential read", Value: mbps(c.t.raw), Unit: "MB/s"},
			Goal: g, Met: met, Better: "higher",
			What: what + "; " + c.cache + "; the reference reads the same blob files one after another, no HTTP; the stick's registry checks every blob's digest while it streams"})
		g, met = benchtable.Goal(c.t.dist.Seconds()/c.t.ours.Seconds(), "higher", 1.0)
		benchtable.Record(b, benchtable.Row{Group: "registry", Name: "pull vs distribution, " + c.name,
			Ours: benchtable.Side{Name: "stick registry", Value: mbps(c.t.ours), Unit: "MB/s"},
			Ref:  benchtable.Side{Name: "distribution v3.0.0", Value: mbps(c.t.dist), Unit: "MB/s"},
			Goal: g, Met: met, Better: "higher",
			What: what + "; " + c.cache + "; distribution serves the same images from its filesystem store (pushed before the timing) and checks no digest on read"})
	}
}
