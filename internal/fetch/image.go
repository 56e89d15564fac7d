package fetch

import (
	"bytes"
	"context"
	"fmt"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/bootstick/bootstick/internal/cas"
)

// Platform is the only platform the stick carries.
var Platform = v1.Platform{OS: "linux", Architecture: "amd64"}

// PullImage copies an image into the cache: its manifest (or index, with
// the linux/amd64 manifest under it), config and layers, each checked
// against its digest. With a pinned digest, an image already complete in
// the cache is not fetched. It returns the top digest (what the lock pins).
func PullImage(ctx context.Context, store *cas.Store, ref string, pinned cas.Digest, opts ...remote.Option) (cas.Digest, error) {
	if pinned != "" && Complete(store, pinned) {
		return pinned, nil
	}
	r := ref
	if pinned != "" {
		tag, err := name.NewTag(ref)
		if err != nil {
			return "", fmt.Errorf("image %s: %w", ref, err)
		}
		r = tag.Context().Name() + "@" + string(pinned)
	}
	nref, err := name.ParseReference(r)
	if err != nil {
		return "", fmt.Errorf("image %s: %w", ref, err)
	}
	opts = append(opts, remote.WithContext(ctx), remote.WithPlatform(Platform))
	desc, err := remote.Get(nref, opts...)
	if err != nil {
		return "", fmt.Errorf("pulling image %s: %w", ref, err)
	}
	top := cas.Digest(desc.Digest.String())
	if pinned != "" && top != pinned {
		return "", fmt.Errorf("pulling image %s: the registry served digest %s, the lock pins %s", ref, top, pinned)
	}
	if _, _, err := store.Put(bytes.NewReader(desc.Manifest), top); err != nil {
		return "", fmt.Errorf("pulling image %s: %w", ref, err)
	}
	var img v1.Image
	if desc.MediaType.IsIndex() {
		idx, err := desc.ImageIndex()
		if err != nil {
			return "", fmt.Errorf("pulling image %s: %w", ref, err)
		}
		im, err := idx.IndexManifest()
		if err != nil {
			return "", fmt.Errorf("pulling image %s: %w", ref, err)
		}
		var child *v1.Descriptor
		for i, m := range im.Manifests {
			if m.Platform != nil && m.Platform.OS == Platform.OS && m.Platform.Architecture == Platform.Architecture {
				child = &im.Manifests[i]
				break
			}
		}
		if child == nil {
			return "", fmt.Errorf("pulling image %s: it has no linux/amd64 image", ref)
		}
		img, err = idx.Image(child.Digest)
		if err != nil {
			return "", fmt.Errorf("pulling image %s: %w", ref, err)
		}
		raw, err := img.RawManifest()
		if err != nil {
			return "", fmt.Errorf("pulling image %s: %w", ref, err)
		}
		if _, _, err := store.Put(bytes.NewReader(raw), cas.Digest(child.Digest.String())); err != nil {
			return "", fmt.Errorf("pulling image %s: %w", ref, err)
		}
	} else {
		img, err = desc.Image()
		if err != nil {
			return "", fmt.Errorf("pulling image %s: %w", ref, err)
		}
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		return "", fmt.Errorf("pulling image %s: %w", ref, err)
	}
	rawCfg, err := img.RawConfigFile()
	if err != nil {
		return "", fmt.Errorf("pulling image %s: %w", ref, err)
	}
	if _, _, err := store.Put(bytes.NewReader(rawCfg), cas.Digest(cfgName.String())); err != nil {
		return "", fmt.Errorf("pulling image %s: config: %w", ref, err)
	}
	layers, err := img.Layers()
	if err != nil {
		return "", fmt.Errorf("pulling image %s: %w", ref, err)
	}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return "", fmt.Errorf("pulling image %s: %w", ref, err)
		}
		if store.Has(cas.Digest(d.String())) {
			continue
		}
		rc, err := l.Compressed()
		if err != nil {
			return "", fmt.Errorf("pulling image %s: layer %s: %w", ref, d, err)
		}
		_, _, err = store.Put(rc, cas.Digest(d.String()))
		rc.Close()
		if err != nil {
			return "", fmt.Errorf("pulling image %s: layer %s: %w", ref, d, err)
		}
	}
	return top, nil
}

// Complete reports whether an image's manifest and every blob it needs are
// in the cache.
func Complete(store *cas.Store, top cas.Digest) bool {
	blobs, err := ImageBlobs(store, top)
	if err != nil {
		return false
	}
	for _, b := range blobs {
		if !store.Has(b.Digest) {
			return false
		}
	}
	return true
}

// Blob is one blob of an image.
type Blob struct {
	Digest cas.Digest
	Size   int64
}

// ImageBlobs lists the blobs of a stored image, top first: for an index,
// the index and its linux/amd64 manifest's blobs (other platforms are not
// carried); for a manifest, itself, its config and its layers. Manifests
// are read from the cache, so they must be there; the others need not be.
func ImageBlobs(store *cas.Store, top cas.Digest) ([]Blob, error) {
	raw, err := readBlob(store, top)
	if err != nil {
		return nil, err
	}
	out := []Blob{{Digest: top, Size: int64(len(raw))}}
	var probe struct {
		MediaType string          `json:"mediaType"`
		Manifests []v1.Descriptor `json:"manifests"`
	}
	if err := jsonUnmarshal(raw, &probe); err != nil {
		return nil, fmt.Errorf("image manifest %s: %w", top, err)
	}
	if probe.Manifests != nil {
		for _, m := range probe.Manifests {
			if m.Platform != nil && m.Platform.OS == Platform.OS && m.Platform.Architecture == Platform.Architecture {
				sub, err := ImageBlobs(store, cas.Digest(m.Digest.String()))
				if err != nil {
					return nil, err
				}
				return append(out, sub...), nil
			}
		}
		return nil, fmt.Errorf("image index %s has no linux/amd64 image", top)
	}
	m, err := v1.ParseManifest(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("image manifest %s: %w", top, err)
	}
	out = append(out, Blob{Digest: cas.Digest(m.Config.Digest.String()), Size: m.Config.Size})
	for _, l := range m.Layers {
		out = append(out, Blob{Digest: cas.Digest(l.Digest.String()), Size: l.Size})
	}
	return out, nil
}
