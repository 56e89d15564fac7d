package ocibuild

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/bootstick/bootstick/internal/cas"
)

// Annotations of an image in a layout's index.json, as containerd writes
// them: the full reference, and the tag alone.
const (
	AnnotationImageName = "io.containerd.image.name"
	AnnotationRefName   = "org.opencontainers.image.ref.name"
)

// DefaultPath is the PATH of every image.
const DefaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Config is what an image runs.
type Config struct {
	Entrypoint []string
	Env        []string
	WorkingDir string
}

// Image is a stored image: its manifest and every blob it uses.
type Image struct {
	Ref      string     `json:"ref"`
	Manifest cas.Digest `json:"manifest"`
	Size     int64      `json:"size"` // of the manifest
	Config   cas.Digest `json:"config"`
	Layers   []Layer    `json:"layers"`
}

// Blobs lists the manifest, the config and the layers.
func (im Image) Blobs() []cas.Digest {
	out := []cas.Digest{im.Manifest, im.Config}
	for _, l := range im.Layers {
		out = append(out, l.Digest)
	}
	return out
}

// WriteImage stores the config and manifest of a linux/amd64 image made of
// the given layers, bottom first.
func WriteImage(store *cas.Store, ref string, layers []Layer, cfg Config, epoch time.Time) (Image, error) {
	if _, err := name.NewTag(ref, name.StrictValidation); err != nil {
		return Image{}, fmt.Errorf("image %s: %w", ref, err)
	}
	env := cfg.Env
	if len(env) == 0 {
		env = []string{DefaultPath}
	}
	cf := v1.ConfigFile{
		Architecture: "amd64",
		OS:           "linux",
		Created:      v1.Time{Time: epoch.UTC()},
		Config: v1.Config{
			Entrypoint: cfg.Entrypoint,
			Env:        env,
			WorkingDir: cfg.WorkingDir,
		},
		RootFS: v1.RootFS{Type: "layers"},
	}
	m := v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1}
	for _, l := range layers {
		diff, err := v1.NewHash(string(l.DiffID))
		if err != nil {
			return Image{}, err
		}
		dig, err := v1.NewHash(string(l.Digest))
		if err != nil {
			return Image{}, err
		}
		cf.RootFS.DiffIDs = append(cf.RootFS.DiffIDs, diff)
		cf.History = append(cf.History, v1.History{Created: v1.Time{Time: epoch.UTC()}, CreatedBy: "bootstick toolchain"})
		m.Layers = append(m.Layers, v1.Descriptor{MediaType: types.OCILayer, Size: l.Size, Digest: dig})
	}
	cfgBytes, err := json.Marshal(cf)
	if err != nil {
		return Image{}, fmt.Errorf("image %s: %w", ref, err)
	}
	cfgDigest, cfgSize, err := store.Put(bytes.NewReader(cfgBytes), "")
	if err != nil {
		return Image{}, fmt.Errorf("image %s: %w", ref, err)
	}
	ch, _ := v1.NewHash(string(cfgDigest))
	m.Config = v1.Descriptor{MediaType: types.OCIConfigJSON, Size: cfgSize, Digest: ch}
	mBytes, err := json.Marshal(m)
	if err != nil {
		return Image{}, fmt.Errorf("image %s: %w", ref, err)
	}
	mDigest, mSize, err := store.Put(bytes.NewReader(mBytes), "")
	if err != nil {
		return Image{}, fmt.Errorf("image %s: %w", ref, err)
	}
	return Image{Ref: ref, Manifest: mDigest, Size: mSize, Config: cfgDigest, Layers: layers}, nil
}

// WriteLayout makes an OCI image layout at dir (which must not exist yet)
// holding the images: blobs are hard links into the store, each stored once
// however many images share it, and index.json names every image by its
// full reference.
func WriteLayout(store *cas.Store, dir string, images []Image) error {
	blobs := filepath.Join(dir, "blobs", "sha256")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		return fmt.Errorf("writing layout %s: %w", dir, err)
	}
	idx := v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex}
	for _, im := range images {
		for _, d := range im.Blobs() {
			if err := store.Link(d, filepath.Join(blobs, d.Hex())); err != nil {
				return fmt.Errorf("writing layout %s: image %s: %w", dir, im.Ref, err)
			}
		}
		tag, err := name.NewTag(im.Ref, name.StrictValidation)
		if err != nil {
			return fmt.Errorf("writing layout %s: %w", dir, err)
		}
		h, err := v1.NewHash(string(im.Manifest))
		if err != nil {
			return err
		}
		idx.Manifests = append(idx.Manifests, v1.Descriptor{
			MediaType: types.OCIManifestSchema1,
			Size:      im.Size,
			Digest:    h,
			Platform:  &v1.Platform{Architecture: "amd64", OS: "linux"},
			Annotations: map[string]string{
				AnnotationImageName: im.Ref,
				AnnotationRefName:   tag.TagStr(),
			},
		})
	}
	b, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "index.json"), b, 0o644); err != nil {
		return fmt.Errorf("writing layout %s: %w", dir, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644); err != nil {
		return fmt.Errorf("writing layout %s: %w", dir, err)
	}
	return nil
}
