package fetch

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/bootstick/bootstick/internal/cas"
)

func TestPullImage(t *testing.T) {
	ts := httptest.NewServer(registry.New())
	defer ts.Close()
	host := strings.TrimPrefix(ts.URL, "http://")

	img, err := random.Image(1024, 2)
	if err != nil {
		t.Fatal(err)
	}
	single := host + "/test/single:v1"
	if err := remote.Write(mustRef(t, single), img); err != nil {
		t.Fatal(err)
	}
	// A two-platform index: only linux/amd64 is carried.
	other, _ := random.Image(512, 1)
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex),
		mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
		mutate.IndexAddendum{Add: other, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}}},
	)
	multi := host + "/test/multi:v1"
	if err := remote.WriteIndex(mustRef(t, multi), idx); err != nil {
		t.Fatal(err)
	}
	idxDigest, _ := idx.Digest()
	imgDigest, _ := img.Digest()

	store, _ := cas.Open(t.TempDir())
	ctx := context.Background()
	got, err := PullImage(ctx, store, multi, "")
	if err != nil {
		t.Fatal(err)
	}
	if got != cas.Digest(idxDigest.String()) || !Complete(store, got) {
		t.Fatalf("pulled %s, want %s (complete %v)", got, idxDigest, Complete(store, got))
	}
	blobs, err := ImageBlobs(store, got)
	if err != nil {
		t.Fatal(err)
	}
	// index, manifest, config, 2 layers; nothing of arm64.
	if len(blobs) != 5 || blobs[1].Digest != cas.Digest(imgDigest.String()) {
		t.Errorf("blobs %v", blobs)
	}
	otherDigest, _ := other.Digest()
	if store.Has(cas.Digest(otherDigest.String())) {
		t.Error("the arm64 image was pulled")
	}
	for _, b := range blobs {
		if err := store.Verify(b.Digest); err != nil {
			t.Error(err)
		}
	}
	// Single manifest, pinned; shares every blob with the index's image.
	d, err := PullImage(ctx, store, single, cas.Digest(imgDigest.String()))
	if err != nil || d != cas.Digest(imgDigest.String()) {
		t.Fatalf("%s %v", d, err)
	}
	// Pinned and complete: no network needed.
	ts.Close()
	if _, err := PullImage(ctx, store, single, d); err != nil {
		t.Errorf("a cached pinned image went to the network: %v", err)
	}
}

func TestPullImageWrongDigest(t *testing.T) {
	ts := httptest.NewServer(registry.New())
	defer ts.Close()
	host := strings.TrimPrefix(ts.URL, "http://")
	img, _ := random.Image(256, 1)
	ref := host + "/test/a:v1"
	if err := remote.Write(mustRef(t, ref), img); err != nil {
		t.Fatal(err)
	}
	store, _ := cas.Open(t.TempDir())
	wrong := cas.Digest("sha256:" + strings.Repeat("0", 64))
	_, err := PullImage(context.Background(), store, ref, wrong)
	if err == nil || !strings.Contains(err.Error(), ref) {
		t.Fatalf("got %v", err)
	}
}

func mustRef(t *testing.T, s string) name.Reference {
	r, err := name.ParseReference(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
