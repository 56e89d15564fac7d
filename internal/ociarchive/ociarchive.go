// Package ociarchive reads the images of an OCI image layout (what the
// bundle's registry serves) and writes some of them as one tar of an OCI
// layout, which `ctr images import` takes with every digest unchanged.
package ociarchive

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/bootstick/bootstick/internal/registry"
)

// Images maps each image the layout names (annotation
// io.containerd.image.name, normalised by registry.ParseRef) to its
// index.json entry.
func Images(dir string) (layout.Path, v1.ImageIndex, map[string]v1.Descriptor, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return "", nil, nil, fmt.Errorf("opening OCI layout %s: %w", dir, err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return "", nil, nil, fmt.Errorf("opening OCI layout %s: %w", dir, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return "", nil, nil, fmt.Errorf("opening OCI layout %s: index.json: %w", dir, err)
	}
	byRef := map[string]v1.Descriptor{}
	for _, d := range im.Manifests {
		r, err := registry.ParseRef(d.Annotations[registry.AnnotationImageName])
		if err != nil {
			continue // unnamed entries are not images of the bundle
		}
		byRef[r.String()] = d
	}
	return p, idx, byRef, nil
}

// Lookup resolves refs to the layout's index.json entries, in order,
// with each normalised ref. A ref the layout lacks is an error naming
// every missing one.
func Lookup(layoutDir string, byRef map[string]v1.Descriptor, refs []string) ([]v1.Descriptor, []registry.ImageRef, error) {
	var (
		found   []v1.Descriptor
		names   []registry.ImageRef
		missing []string
	)
	for _, ref := range refs {
		r, err := registry.ParseRef(ref)
		if err != nil {
			return nil, nil, err
		}
		d, ok := byRef[r.String()]
		if !ok {
			missing = append(missing, ref)
			continue
		}
		found, names = append(found, d), append(names, r)
	}
	if len(missing) > 0 {
		return nil, nil, fmt.Errorf("the OCI layout %s has no image %s", layoutDir, strings.Join(missing, ", "))
	}
	return found, names, nil
}

// Write writes the images refs names, read from the OCI layout at
// layoutDir, to w as a tar of an OCI layout holding just them, each blob
// once. Unlike a docker archive it keeps every manifest as it is, so an
// image keeps its digest: a pod that names it by digest
// (name@sha256:...) finds it in a node that imported the archive
// (`ctr images import`, which kind's LoadImageArchive runs). The index
// carries each image twice, with the annotation io.containerd.image.name
// naming its tag reference and its digest reference (repo@sha256:...). A
// ref the layout lacks is an error that names it; nothing is written then.
func Write(layoutDir string, refs []string, w io.Writer) error {
	p, _, byRef, err := Images(layoutDir)
	if err != nil {
		return err
	}
	descs, names, err := Lookup(layoutDir, byRef, refs)
	if err != nil {
		return err
	}
	var entries, blobs []v1.Descriptor
	seen := map[v1.Hash]bool{}
	for i, d := range descs {
		r := names[i]
		d.Annotations = map[string]string{registry.AnnotationImageName: r.String(), registry.AnnotationRefName: r.Tag}
		// The same manifest under <repo>@<digest> too: containerd looks a
		// digest reference up under exactly that name, and `ctr images
		// import` makes only the names the index carries.
		byDigest := d
		byDigest.Annotations = map[string]string{registry.AnnotationImageName: r.Registry + "/" + r.Repository + "@" + d.Digest.String()}
		entries = append(entries, d, byDigest)
		if blobs, err = appendBlobs(p, d, blobs, seen, 0); err != nil {
			return fmt.Errorf("image %s in %s: %w", refs[i], layoutDir, err)
		}
	}
	index, err := json.Marshal(v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: entries})
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	file := func(name string, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	if err := file("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return fmt.Errorf("writing the image archive: %w", err)
	}
	if err := file("index.json", index); err != nil {
		return fmt.Errorf("writing the image archive: %w", err)
	}
	for _, b := range blobs {
		if err := copyBlob(tw, p, b); err != nil {
			return fmt.Errorf("writing the image archive: blob %s: %w", b.Digest, err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("writing the image archive: %w", err)
	}
	return nil
}

// appendBlobs appends d and every blob it references (an index's
// manifests that the layout holds, a manifest's config and layers).
func appendBlobs(p layout.Path, d v1.Descriptor, out []v1.Descriptor, seen map[v1.Hash]bool, depth int) ([]v1.Descriptor, error) {
	if seen[d.Digest] {
		return out, nil
	}
	if depth > 4 {
		return nil, fmt.Errorf("manifest %s: indexes nested too deep", d.Digest)
	}
	seen[d.Digest] = true
	out = append(out, d)
	switch {
	case d.MediaType.IsIndex():
		data, err := p.Bytes(d.Digest)
		if err != nil {
			return nil, err
		}
		im, err := v1.ParseIndexManifest(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("index %s: %w", d.Digest, err)
		}
		for _, c := range im.Manifests {
			if _, err := os.Stat(filepath.Join(string(p), "blobs", c.Digest.Algorithm, c.Digest.Hex)); err != nil {
				continue // a platform the bundle left out
			}
			var err error
			if out, err = appendBlobs(p, c, out, seen, depth+1); err != nil {
				return nil, err
			}
		}
	case d.MediaType.IsImage():
		data, err := p.Bytes(d.Digest)
		if err != nil {
			return nil, err
		}
		m, err := v1.ParseManifest(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("manifest %s: %w", d.Digest, err)
		}
		for _, b := range append([]v1.Descriptor{m.Config}, m.Layers...) {
			if !seen[b.Digest] {
				seen[b.Digest] = true
				out = append(out, b)
			}
		}
	default:
		return nil, fmt.Errorf("manifest %s: media type %q is not a manifest or an index", d.Digest, d.MediaType)
	}
	return out, nil
}

// copyBlob writes one blob into the tar under blobs/ALGO/HEX, checking
// that it has the size its descriptor gives.
func copyBlob(tw *tar.Writer, p layout.Path, d v1.Descriptor) error {
	rc, err := p.Blob(d.Digest)
	if err != nil {
		return err
	}
	defer rc.Close()
	hdr := &tar.Header{Name: "blobs/" + d.Digest.Algorithm + "/" + d.Digest.Hex, Mode: 0o644, Size: d.Size, Typeflag: tar.TypeReg}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	n, err := io.Copy(tw, io.LimitReader(rc, d.Size))
	if err != nil {
		return err
	}
	if n != d.Size {
		return fmt.Errorf("%d bytes, want %d", n, d.Size)
	}
	return nil
}
