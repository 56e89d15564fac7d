package stick

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/bootstick/bootstick/internal/benchtable"
	"github.com/bootstick/bootstick/internal/bundle"
	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/payload"
	"github.com/bootstick/bootstick/internal/progress"
	"github.com/bootstick/bootstick/internal/registry"
	"github.com/bootstick/bootstick/internal/toolchain"
)

// BenchmarkRegistrySharing writes the stick's registry from the real
// toolchain's images (kind mode's node image is not on a stick) and
// reports its bytes against the sum of the images' sizes.
func BenchmarkRegistrySharing(b *testing.B) {
	cache := cas.DefaultRoot()
	tc, err := toolchain.Open(cache)
	if err != nil {
		b.Fatalf("%v: run make toolchain first", err)
	}
	store, err := cas.Open(cache)
	if err != nil {
		b.Fatal(err)
	}
	var images []bundle.LockedImage
	for _, im := range tc.Manifest.Images {
		if !im.KindNode {
			images = append(images, bundle.LockedImage{Ref: im.Ref, Digest: im.Digest, Source: bundle.SourceToolchain})
		}
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
	benchtable.Record(b, benchtable.Row{Group: "iso size", Name: "registry vs its images",
		Ours:   benchtable.Side{Name: "registry", Value: float64(st.RegistryBytes) / 1e6, Unit: "MB"},
		Ref:    benchtable.Side{Name: "sum of the images", Value: float64(st.ImageBytes) / 1e6, Unit: "MB"},
		Better: "lower",
		What:   fmt.Sprintf("the stick's registry written from the %d images of the toolchain (each blob once) against the sum of each image's own size", len(images))})
}

// extractISOBundle copies the /bundle folder of the stick `make iso`
// built (BOOTSTICK_BENCH_ISO overrides it) to a temporary folder, read
// through go-diskfs (this kernel has no ISO 9660), and returns it.
func extractISOBundle(b *testing.B) string {
	iso := os.Getenv("BOOTSTICK_BENCH_ISO")
	if iso == "" {
		iso = filepath.Join("..", "..", "out", "bootstick.iso")
	}
	if _, err := os.Stat(iso); err != nil {
		b.Fatalf("%v: run make iso first (make bench does)", err)
	}
	fsys, closeFS, err := isoFS(iso)
	if err != nil {
		b.Fatal(err)
	}
	defer closeFS()
	// (os.CopyFS refuses go-diskfs's files: their modes say nothing.)
	dir := filepath.Join(b.TempDir(), "bundle")
	err = fs.WalkDir(fsys, "bundle", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		out := filepath.Join(dir, strings.TrimPrefix(p, "bundle"))
		if d.IsDir() {
			return os.MkdirAll(out, 0o755)
		}
		data, err := readAll(fsys, p)
		if err != nil {
			return err
		}
		return os.WriteFile(out, data, 0o644)
	})
	if err != nil {
		b.Fatalf("copying the bundle out of %s: %v", iso, err)
	}
	return dir
}

// BenchmarkBundleCheck hashes the stick's bundle the way firstboot's boot
// check does (VerifyFS: every payload file and every registry blob against
// bundle.lock), against `sha256sum` over the same files, each with the page
// cache dropped first (a boot reads the stick). It also times the check of
// everything but the registry's blobs (VerifyPayload), which would be the
// whole boot-time check if the registry's check of each blob as it serves
// it were relied on.
func BenchmarkBundleCheck(b *testing.B) {
	dir := extractISOBundle(b)
	l, err := bundle.ReadLock(filepath.Join(dir, "bundle.lock"))
	if err != nil || l == nil {
		b.Fatalf("the stick's bundle.lock: %v", err)
	}
	fsys := os.DirFS(dir)
	var files []string
	err = fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			files = append(files, p)
		}
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	sort.Strings(files)
	ctx := context.Background()
	var tOurs, tSum, tPayload time.Duration
	var bytes, payloadBytes int64
	const rounds = 2
	b.ResetTimer()
	for range rounds {
		benchtable.DropCaches(b)
		start := time.Now()
		res, err := bundle.VerifyFS(ctx, fsys, ".", l, nil, progress.Nop())
		tOurs += time.Since(start)
		if err != nil || len(res.Problems) > 0 {
			b.Fatalf("the stick does not verify: %v %v", err, res.Problems)
		}
		bytes = res.Bytes

		benchtable.DropCaches(b)
		// The files VerifyFS hashed: the lock's payload and the blobs.
		args := []string{}
		for fp := range l.PayloadFiles() {
			args = append(args, path.Clean(fp))
		}
		blobs, _ := filepath.Glob(filepath.Join(dir, "registry", "blobs", "sha256", "*"))
		for _, bl := range blobs {
			rel, _ := filepath.Rel(dir, bl)
			args = append(args, rel)
		}
		cmd := exec.Command("sha256sum", args...)
		cmd.Dir = dir
		start = time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("sha256sum: %v\n%.2000s", err, out)
		}
		tSum += time.Since(start)

		benchtable.DropCaches(b)
		start = time.Now()
		res, err = bundle.VerifyPayload(ctx, fsys, ".", l, progress.Nop())
		tPayload += time.Since(start)
		if err != nil || len(res.Problems) > 0 {
			b.Fatalf("the stick's payload does not verify: %v %v", err, res.Problems)
		}
		payloadBytes = res.Bytes
	}
	b.StopTimer()
	mbps := func(n int64, d time.Duration) float64 { return float64(n) * rounds / 1e6 / d.Seconds() }
	benchtable.Record(b, benchtable.Row{Group: "boot check", Name: "bundle check vs sha256sum",
		Ours:   benchtable.Side{Name: "VerifyFS", Value: mbps(bytes, tOurs), Unit: "MB/s"},
		Ref:    benchtable.Side{Name: "sha256sum", Value: mbps(bytes, tSum), Unit: "MB/s"},
		Better: "higher",
		What:   fmt.Sprintf("the stick's bundle, copied out of the ISO to this machine's disk as firstboot does on a kernel without ISO 9660 (%d files, %.0f MB hashed: the lock's payload and every registry blob), page cache dropped before each side, mean of %d rounds; VerifyFS hashes two files at a time, sha256sum one", len(files), float64(bytes)/1e6, rounds)})
	benchtable.Record(b, benchtable.Row{Group: "boot check", Name: "payload only vs everything",
		Ours:   benchtable.Side{Name: "VerifyPayload", Value: (tPayload / rounds).Seconds(), Unit: "s"},
		Ref:    benchtable.Side{Name: "VerifyFS", Value: (tOurs / rounds).Seconds(), Unit: "s"},
		Better: "lower",
		What:   fmt.Sprintf("the boot check without the registry's blobs (%.0f MB: packages, OS images, manifests, lock) against the whole check (%.0f MB); the registry checks each blob's digest as it serves it", float64(payloadBytes)/1e6, float64(bytes)/1e6)})
}

// BenchmarkISOShares reports the size of the stick `make iso` built and
// the share of each part: the live OS, each image of the registry (its own
// blobs; layers two images share are a part of their own), each OS image,
// the compute nodes' packages and the rest (boot files, manifests, lock).
func BenchmarkISOShares(b *testing.B) {
	iso := os.Getenv("BOOTSTICK_BENCH_ISO")
	if iso == "" {
		iso = filepath.Join("..", "..", "out", "bootstick.iso")
	}
	fi, err := os.Stat(iso)
	if err != nil {
		b.Fatalf("%v: run make iso first (make bench does)", err)
	}
	fsys, closeFS, err := isoFS(iso)
	if err != nil {
		b.Fatal(err)
	}
	defer closeFS()
	sizes := map[string]int64{} // path -> size
	err = fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		sizes[p] = info.Size()
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	// Which images use each blob.
	users := map[string][]string{}
	idxData, err := readAll(fsys, "bundle/registry/index.json")
	if err != nil {
		b.Fatal(err)
	}
	idx, err := v1.ParseIndexManifest(bytes.NewReader(idxData))
	if err != nil {
		b.Fatal(err)
	}
	for _, d := range idx.Manifests {
		name := d.Annotations[registry.AnnotationImageName]
		raw, err := readAll(fsys, "bundle/registry/blobs/sha256/"+d.Digest.Hex)
		if err != nil {
			b.Fatal(err)
		}
		m, err := v1.ParseManifest(bytes.NewReader(raw))
		if err != nil {
			b.Fatalf("image %s: %v", name, err)
		}
		users[d.Digest.Hex] = append(users[d.Digest.Hex], name)
		for _, l := range append([]v1.Descriptor{m.Config}, m.Layers...) {
			if !slices.Contains(users[l.Digest.Hex], name) {
				users[l.Digest.Hex] = append(users[l.Digest.Hex], name)
			}
		}
	}
	parts := map[string]int64{}
	for p, n := range sizes {
		switch {
		case strings.HasPrefix(p, "live/"):
			parts["live OS (kernel, initrd, squashfs)"] += n
		case strings.HasPrefix(p, "bundle/registry/blobs/sha256/"):
			u := users[path.Base(p)]
			switch len(u) {
			case 0:
				parts["registry: unreferenced blobs"] += n
			case 1:
				parts["image "+u[0]] += n
			default:
				parts["registry: layers shared by images"] += n
			}
		case strings.HasPrefix(p, "bundle/os-images/") && !strings.HasSuffix(p, ".sha256"):
			parts["os-image "+path.Base(p)] += n
		case strings.HasPrefix(p, "bundle/packages/"):
			parts["packages for the compute nodes"] += n
		default:
			parts["the rest (boot, manifests, lock, index, checksums)"] += n
		}
	}
	names := make([]string, 0, len(parts))
	for n := range parts {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return parts[names[i]] > parts[names[j]] })
	total := float64(fi.Size()) / 1e6
	for _, n := range names {
		mb := float64(parts[n]) / 1e6
		benchtable.Record(b, benchtable.Row{Group: "iso size", Name: n,
			Ours: benchtable.Side{Name: "part", Value: mb, Unit: "MB"},
			Ref:  benchtable.Side{Name: "ISO", Value: total, Unit: "MB"},
			What: fmt.Sprintf("bytes of the part's files in %s (%.1f MB, the ratio is the part's share)", filepath.Base(iso), total)})
	}
}
