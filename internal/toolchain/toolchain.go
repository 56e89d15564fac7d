// Package toolchain builds what images/recipes.yaml names, from pinned
// sources, into the content-addressed cache: the Go binaries (Kubernetes,
// etcd, CoreDNS, pause) and the OCI images kubeadm pulls for the pinned
// release.
//
// Each recipe and each image is one cached action, keyed by the hash of
// its inputs: a rebuild with nothing changed does no work, and a changed
// pin rebuilds only what depends on it. The result is a view folder,
//
//	<cache>/toolchain/current -> views/<hash>/
//	    bin/<binary>     hard links into the cache
//	    oci/             an OCI image layout of every image
//	    toolchain.json   what was built, from what, with digests
//
// swapped into place atomically, so readers never see a half-built view.
package toolchain

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/progress"
	"github.com/bootstick/bootstick/internal/recipes"
	"github.com/bootstick/bootstick/internal/rootfs"
	"github.com/bootstick/bootstick/internal/toolchain/record"
)

// Options say what to build and where.
type Options struct {
	Spec  *recipes.Spec
	Store *cas.Store
	// Go is the go command; "go" when empty.
	Go string
	// Epoch is the time stamped into binaries and images
	// (SOURCE_DATE_EPOCH); the Unix epoch when zero.
	Epoch time.Time
	// Progress shows each recipe's compile (nil: none).
	Progress progress.Progress
	// Mirror gives the Debian mirror of a suite for the Debian roots, and
	// of its -security suite (the security archive); the build host's apt
	// configuration when nil (rootfs.HostMirror).
	Mirror func(suite string) (string, error)
}

func (o Options) mirror(suite string) (string, error) {
	if o.Mirror != nil {
		return o.Mirror(suite)
	}
	return rootfs.HostMirror("/", suite)
}

// The toolchain's records live in package record, which the lock reads
// without linking the builder.
type (
	Manifest     = record.Manifest
	Binary       = record.Binary
	RecipeRecord = record.RecipeRecord
	ImageRecord  = record.ImageRecord
)

// Result is a built toolchain view.
type Result struct {
	Dir      string
	Manifest Manifest
}

// BinDir is where the binaries are.
func (r *Result) BinDir() string { return filepath.Join(r.Dir, "bin") }

// Bin is the path of one binary.
func (r *Result) Bin(name string) string { return filepath.Join(r.Dir, "bin", name) }

// File is the path of one artifact's file.
func (r *Result) File(name string) string { return filepath.Join(r.Dir, "files", name) }

// Layout is the OCI image layout.
func (r *Result) Layout() string { return filepath.Join(r.Dir, "oci") }

// Open reads the current toolchain view of a cache folder.
func Open(cacheDir string) (*Result, error) {
	dir, err := filepath.EvalSymlinks(filepath.Join(cacheDir, "toolchain", "current"))
	if err != nil {
		return nil, fmt.Errorf("no toolchain in cache %s: run `make toolchain` first (%w)", cacheDir, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "toolchain.json"))
	if err != nil {
		return nil, fmt.Errorf("toolchain %s is incomplete: run `make toolchain` again (%w)", dir, err)
	}
	r := &Result{Dir: dir}
	if err := json.Unmarshal(b, &r.Manifest); err != nil {
		return nil, fmt.Errorf("reading %s/toolchain.json: %w", dir, err)
	}
	return r, nil
}
