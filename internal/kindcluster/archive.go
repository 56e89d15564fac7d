package kindcluster

import (
	"fmt"
	"io"
	"runtime"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/bootstick/bootstick/internal/ociarchive"
	"github.com/bootstick/bootstick/internal/registry"
)

// HasImage reports whether the OCI layout names the image ref.
func HasImage(layoutDir, ref string) (bool, error) {
	r, err := registry.ParseRef(ref)
	if err != nil {
		return false, err
	}
	_, _, byRef, err := ociarchive.Images(layoutDir)
	if err != nil {
		return false, err
	}
	_, ok := byRef[r.String()]
	return ok, nil
}

// WriteImageArchive writes the images refs names, read from the OCI
// layout at layoutDir, to w as one docker archive (what `docker load`,
// `podman load` and `kind load image-archive` take), each tagged with the
// ref as given. Where the layout holds an index, the image for linux and
// this machine's architecture is taken. A ref the layout lacks is an
// error that names it; nothing is written then.
func WriteImageArchive(layoutDir string, refs []string, w io.Writer) error {
	_, idx, byRef, err := ociarchive.Images(layoutDir)
	if err != nil {
		return err
	}
	descs, _, err := ociarchive.Lookup(layoutDir, byRef, refs)
	if err != nil {
		return err
	}
	images := map[name.Reference]v1.Image{}
	for i, ref := range refs {
		img, err := imageFor(idx, descs[i])
		if err != nil {
			return fmt.Errorf("image %s in %s: %w", ref, layoutDir, err)
		}
		tag, err := name.NewTag(ref, name.WeakValidation)
		if err != nil {
			return fmt.Errorf("image %s: %w", ref, err)
		}
		images[tag] = img
	}
	if err := tarball.MultiRefWrite(images, w); err != nil {
		return fmt.Errorf("writing the image archive: %w", err)
	}
	return nil
}

// imageFor returns the image an index.json entry names: the entry itself,
// or the linux image for this architecture of an index.
func imageFor(idx v1.ImageIndex, d v1.Descriptor) (v1.Image, error) {
	if !d.MediaType.IsIndex() {
		return idx.Image(d.Digest)
	}
	child, err := idx.ImageIndex(d.Digest)
	if err != nil {
		return nil, err
	}
	im, err := child.IndexManifest()
	if err != nil {
		return nil, err
	}
	want := v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
	for _, m := range im.Manifests {
		if m.Platform != nil && m.Platform.Satisfies(want) && m.MediaType.IsImage() {
			return child.Image(m.Digest)
		}
	}
	return nil, fmt.Errorf("index %s has no image for linux/%s", d.Digest, runtime.GOARCH)
}
