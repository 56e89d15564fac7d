package stick

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/bootstick/bootstick/internal/bundle"
	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/payload"
	"github.com/bootstick/bootstick/internal/toolchain"
)

// benchEnv is a small bundle whose cold build downloads a 32 MB OS image
// from a local server and builds the appliance layer, so that a cold build
// and a rebuild differ the way they do for real (minus the toolchain and
// the OS, which are cached actions of their own).
func benchEnv(b *testing.B) (*env, func() Options) {
	data := bytes.Repeat([]byte("bootstick benchmark image "), 32<<20/26)
	_, url := serve(b, map[string][]byte{"/node.raw": data})
	e := newEnv(b, fmt.Sprintf("files: [{url: %q, sha256: %s}]\n", url+"/node.raw", cas.DigestOf(data).Hex()))
	n := 0
	return e, func() Options { n++; return e.options(fmt.Sprintf("b%d.iso", n)) }
}

// BenchmarkRebuild reports, in one run, a rebuild after changing one
// manifest and a rebuild from the lock against a cold build.
func BenchmarkRebuild(b *testing.B) {
	ctx := context.Background()
	var cold, manifest, locked time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		e, opts := benchEnv(b)
		b.StartTimer()
		start := time.Now()
		if _, err := Build(ctx, opts()); err != nil {
			b.Fatal(err)
		}
		cold += time.Since(start)

		os.WriteFile(filepath.Join(e.dir, "manifests", "00-namespace.yaml"),
			[]byte(fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata: {name: demo-%d}\n", i)), 0o644)
		start = time.Now()
		if _, err := Build(ctx, opts()); err != nil {
			b.Fatal(err)
		}
		manifest += time.Since(start)

		o := opts()
		o.Locked = true
		start = time.Now()
		if _, err := Build(ctx, o); err != nil {
			b.Fatal(err)
		}
		locked += time.Since(start)
	}
	b.ReportMetric(float64(cold.Milliseconds())/float64(b.N), "cold-ms")
	b.ReportMetric(float64(manifest)/float64(cold), "manifest-rebuild/cold")
	b.ReportMetric(float64(locked)/float64(cold), "locked-rebuild/cold")
}

// BenchmarkRegistrySharing reports the registry's bytes against the sum of
// its images' sizes: the real toolchain's images when it is built, else
// the stand-in's.
func BenchmarkRegistrySharing(b *testing.B) {
	cache := cas.DefaultRoot()
	tc, err := toolchain.Open(cache)
	var store *cas.Store
	if err == nil {
		store, err = cas.Open(cache)
	}
	if err != nil {
		b.Logf("no real toolchain (%v): measuring the stand-in", err)
		e := newEnv(b, "")
		tc, store = e.tc, e.store
	}
	var images []bundle.LockedImage
	for _, im := range tc.Manifest.Images {
		images = append(images, bundle.LockedImage{Ref: im.Ref, Digest: im.Digest, Source: bundle.SourceToolchain})
	}
	var st payload.RegistryStats
	for i := 0; i < b.N; i++ {
		work, err := store.TempDir("bench-registry-")
		if err != nil {
			b.Fatal(err)
		}
		st, err = payload.WriteRegistry(context.Background(), store, filepath.Join(work, "registry"), images)
		os.RemoveAll(work)
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(st.RegistryBytes)/float64(st.ImageBytes), "registry/images")
	b.ReportMetric(float64(st.RegistryBytes)/1e6, "registry-MB")
	b.ReportMetric(float64(st.ImageBytes)/1e6, "images-MB")
}
