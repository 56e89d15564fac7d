// Package payload lays out the stick's /bundle folder from a lock and the
// cache:
//
//	bundle.lock         the lock the stick was built from
//	registry/           one OCI image layout of every image; blobs shared
//	                    between images are stored once
//	manifests/          the Kubernetes manifests firstboot applies
//	packages/           binaries and .debs for the compute nodes
//	os-images/          compute-node OS images (NAME.sha256 beside each)
//	files/              other files the bundle names
//	site/site.yaml      the site file, when one is embedded, with the
//	                    credentials files it names
//
// Every file taken from the cache is re-hashed first (a corrupt blob is
// removed from the cache and the build fails naming it), and every local
// file is checked against the sha256 the lock pinned. Blobs and files are
// hard links into the cache where the file system allows.
package payload

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/bootstick/bootstick/internal/bundle"
	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/fetch"
	"github.com/bootstick/bootstick/internal/ocibuild"
	"github.com/bootstick/bootstick/internal/registry"
)

// Options say what to stage.
type Options struct {
	Store  *cas.Store
	Lock   *bundle.Lock
	Bundle *bundle.Bundle
	// Site is a validated site file to embed; empty embeds none. SiteFiles
	// are files it names (credentials, the BMC CA), relative to its folder.
	Site      string
	SiteFiles []string
	// Dir is the folder to create (it must not exist).
	Dir string
}

// Stats measure the payload.
type Stats struct {
	Files int   `json:"files"`
	Bytes int64 `json:"bytes"`
	// RegistryBytes is the size of the registry's blobs, each once;
	// ImageBytes the sum of every image's size (shared blobs counted once
	// per image that uses them).
	RegistryBytes int64 `json:"registryBytes"`
	ImageBytes    int64 `json:"imageBytes"`
	Blobs         int   `json:"blobs"`
	Images        int   `json:"images"`
}

// Stage writes the payload.
func Stage(ctx context.Context, o Options) (Stats, error) {
	var st Stats
	if err := os.Mkdir(o.Dir, 0o755); err != nil {
		return st, fmt.Errorf("staging the payload: %w", err)
	}
	if err := os.WriteFile(filepath.Join(o.Dir, "bundle.lock"), o.Lock.Marshal(), 0o644); err != nil {
		return st, fmt.Errorf("staging the payload: %w", err)
	}
	rs, err := WriteRegistry(ctx, o.Store, filepath.Join(o.Dir, "registry"), o.Lock.Images)
	if err != nil {
		return st, err
	}
	st.RegistryBytes, st.ImageBytes, st.Blobs, st.Images = rs.RegistryBytes, rs.ImageBytes, rs.Blobs, rs.Images

	for _, d := range []string{"manifests", "packages", "os-images", "files"} {
		if err := os.Mkdir(filepath.Join(o.Dir, d), 0o755); err != nil {
			return st, fmt.Errorf("staging the payload: %w", err)
		}
	}
	for _, m := range o.Lock.Manifests {
		if err := ctx.Err(); err != nil {
			return st, err
		}
		data, err := o.Lock.PinnedManifest(o.Bundle, m)
		if err != nil {
			return st, err
		}
		if d := cas.DigestOf(data); d != m.SHA256 {
			return st, fmt.Errorf("manifest %s: %s changed since it was locked (sha256 %s with the lock's image digests, locked %s): build again without --locked to relock",
				m.Name, o.Bundle.Path(m.Path), d.Hex(), m.SHA256.Hex())
		}
		if err := os.WriteFile(filepath.Join(o.Dir, m.PayloadPath()), data, 0o644); err != nil {
			return st, fmt.Errorf("manifest %s: %w", m.Name, err)
		}
		st.add(m.Size)
	}
	var cached []bundle.LockedFile
	cached = append(cached, o.Lock.Packages.Binaries...)
	cached = append(cached, o.Lock.Files...)
	for _, d := range o.Lock.Packages.Debs {
		cached = append(cached, bundle.LockedFile{Name: d.File, Dest: "packages", SHA256: d.SHA256, Source: bundle.SourceApt})
	}
	for _, f := range cached {
		if err := ctx.Err(); err != nil {
			return st, err
		}
		d := f.PayloadDigest()
		if d == "" {
			return st, fmt.Errorf("%s is not pinned in the lock (resolve it online first)", f.PayloadPath())
		}
		fi, err := os.Stat(o.Store.BlobPath(d))
		if err != nil {
			return st, fmt.Errorf("%s: %s is not in the cache: %w", f.PayloadPath(), d, err)
		}
		if fi.Size() > bundle.MaxFileSize {
			return st, &bundle.TooLargeError{Where: f.PayloadPath(), File: firstNonEmpty(f.URL, f.Path, f.Name), Size: fi.Size()}
		}
		if err := o.Store.Verify(d); err != nil {
			return st, fmt.Errorf("%s: %w", f.PayloadPath(), err)
		}
		dst := filepath.Join(o.Dir, filepath.FromSlash(f.PayloadPath()))
		if err := o.Store.Link(d, dst); err != nil {
			return st, fmt.Errorf("staging %s: %w", f.PayloadPath(), err)
		}
		st.add(fi.Size())
		if f.Dest == "os-images" {
			line := fmt.Sprintf("%s  %s\n", f.SHA256.Hex(), f.Name)
			if err := os.WriteFile(dst+".sha256", []byte(line), 0o644); err != nil {
				return st, fmt.Errorf("staging %s: %w", f.PayloadPath(), err)
			}
		}
	}
	if o.Site != "" {
		// The site's files may hold BMC passwords: only root reads them
		// on the stick (Rock Ridge keeps the modes).
		siteDir := filepath.Join(o.Dir, "site")
		if err := os.Mkdir(siteDir, 0o700); err != nil {
			return st, fmt.Errorf("staging the site: %w", err)
		}
		if err := copyChecked(o.Site, filepath.Join(siteDir, "site.yaml"), "", 0o600); err != nil {
			return st, fmt.Errorf("staging the site: %w", err)
		}
		for _, rel := range o.SiteFiles {
			clean := filepath.Clean(rel)
			if filepath.IsAbs(clean) || strings.HasPrefix(clean, "..") {
				return st, fmt.Errorf("staging the site: %s is outside the site's folder; keep the files a site names (credentials, the BMC CA) beside it", rel)
			}
			dst := filepath.Join(siteDir, clean)
			if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
				return st, fmt.Errorf("staging the site: %w", err)
			}
			if err := copyChecked(filepath.Join(filepath.Dir(o.Site), clean), dst, "", 0o600); err != nil {
				return st, fmt.Errorf("staging the site: %w", err)
			}
		}
	}
	return st, nil
}

func (s *Stats) add(n int64) { s.Files++; s.Bytes += n }

func firstNonEmpty(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}

// copyChecked copies src to dst (with mode), failing when want is given
// and the content differs.
func copyChecked(src, dst string, want cas.Digest, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(out, h), in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	if got := cas.Digest("sha256:" + hex.EncodeToString(h.Sum(nil))); want != "" && got != want {
		os.Remove(dst)
		return fmt.Errorf("%s changed since it was locked (sha256 %s, locked %s): build again without --locked to relock", src, got.Hex(), want.Hex())
	}
	return nil
}

// RegistryStats measure a registry layout.
type RegistryStats struct {
	RegistryBytes, ImageBytes int64
	Blobs, Images             int
}

// WriteRegistry makes one OCI image layout at dir holding every image, by
// the digest the lock pins: each blob is re-hashed, then linked in once
// however many images share it, and index.json names every image by its
// full reference (as containerd and the firstboot registry read it).
func WriteRegistry(ctx context.Context, store *cas.Store, dir string, images []bundle.LockedImage) (RegistryStats, error) {
	var st RegistryStats
	blobDir := filepath.Join(dir, "blobs", "sha256")
	if err := os.MkdirAll(blobDir, 0o755); err != nil {
		return st, fmt.Errorf("writing the registry: %w", err)
	}
	sorted := append([]bundle.LockedImage(nil), images...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Ref < sorted[j].Ref })
	idx := v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex}
	seen := map[cas.Digest]bool{}
	for _, im := range sorted {
		if err := ctx.Err(); err != nil {
			return st, err
		}
		if im.Digest == "" {
			return st, fmt.Errorf("image %s has no digest in the lock (resolve it online first)", im.Ref)
		}
		blobs, err := fetch.ImageBlobs(store, im.Digest)
		if err != nil {
			return st, fmt.Errorf("image %s: %w", im.Ref, err)
		}
		for _, b := range blobs {
			fi, err := os.Stat(store.BlobPath(b.Digest))
			if err != nil {
				return st, fmt.Errorf("image %s: blob %s is not in the cache", im.Ref, b.Digest)
			}
			st.ImageBytes += fi.Size()
			if seen[b.Digest] {
				continue
			}
			seen[b.Digest] = true
			if err := store.Verify(b.Digest); err != nil {
				return st, fmt.Errorf("image %s: %w", im.Ref, err)
			}
			if err := store.Link(b.Digest, filepath.Join(blobDir, b.Digest.Hex())); err != nil {
				return st, fmt.Errorf("image %s: %w", im.Ref, err)
			}
			st.RegistryBytes += fi.Size()
			st.Blobs++
		}
		r, err := registry.ParseRef(im.Ref)
		if err != nil {
			return st, fmt.Errorf("image %s: %w", im.Ref, err)
		}
		h, err := v1.NewHash(string(im.Digest))
		if err != nil {
			return st, fmt.Errorf("image %s: %w", im.Ref, err)
		}
		raw, err := os.ReadFile(store.BlobPath(im.Digest))
		if err != nil {
			return st, fmt.Errorf("image %s: %w", im.Ref, err)
		}
		var probe struct {
			MediaType types.MediaType `json:"mediaType"`
		}
		_ = json.Unmarshal(raw, &probe)
		if probe.MediaType == "" {
			probe.MediaType = types.OCIManifestSchema1
		}
		desc := v1.Descriptor{
			MediaType: probe.MediaType, Size: int64(len(raw)), Digest: h,
			Annotations: map[string]string{ocibuild.AnnotationImageName: im.Ref, ocibuild.AnnotationRefName: r.Tag},
		}
		if !probe.MediaType.IsIndex() {
			desc.Platform = &v1.Platform{OS: fetch.Platform.OS, Architecture: fetch.Platform.Architecture}
		}
		idx.Manifests = append(idx.Manifests, desc)
		st.Images++
	}
	b, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return st, err
	}
	if err := os.WriteFile(filepath.Join(dir, "index.json"), append(b, '\n'), 0o644); err != nil {
		return st, fmt.Errorf("writing the registry: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644); err != nil {
		return st, fmt.Errorf("writing the registry: %w", err)
	}
	return st, nil
}
