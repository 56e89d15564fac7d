package registry

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// Annotations that name an image in an OCI layout's index.json.
const (
	AnnotationImageName = "io.containerd.image.name"
	AnnotationRefName   = "org.opencontainers.image.ref.name"
)

// Media types the server knows how to walk.
const (
	mediaOCIIndex      = "application/vnd.oci.image.index.v1+json"
	mediaOCIManifest   = "application/vnd.oci.image.manifest.v1+json"
	mediaDockerList    = "application/vnd.docker.distribution.manifest.list.v2+json"
	mediaDockerManifst = "application/vnd.docker.distribution.manifest.v2+json"
)

// maxManifest bounds how much of a manifest is read into memory.
const maxManifest = 4 << 20

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type index struct {
	MediaType string       `json:"mediaType,omitempty"`
	Manifests []descriptor `json:"manifests"`
}

type manifest struct {
	MediaType string       `json:"mediaType,omitempty"`
	Config    descriptor   `json:"config"`
	Layers    []descriptor `json:"layers"`
	Manifests []descriptor `json:"manifests"` // when it is an index
}

// repoKey names a repository the way a mirror request does: the upstream
// registry (the ns parameter) and the repository path.
type repoKey struct{ ns, repo string }

func (k repoKey) String() string { return k.ns + "/" + k.repo }

// repo is what the layout holds for one repository.
type repo struct {
	tags      map[string]descriptor // tag → root manifest or index
	manifests map[string]descriptor // digest → manifest or index reachable from a tag
	blobs     map[string]int64      // digest → size, for configs and layers
}

// ImageRef is a parsed image reference, named the way containerd names
// images (docker.io, not index.docker.io).
type ImageRef struct {
	Registry, Repository, Tag string
	// Digest is the reference's @sha256:..., when it pins one.
	Digest string
}

// String is registry/repository:tag, without the digest: the name the
// layout's index carries.
func (r ImageRef) String() string { return r.Registry + "/" + r.Repository + ":" + r.Tag }

// ParseRef parses a reference such as "registry.k8s.io/pause:3.10" or
// "quay.io/x/y:v1@sha256:..." with go-containerregistry's name package:
// a name with no registry part is on docker.io, a one-part name there is
// under library/, the tag defaults to latest, and a digest is kept apart.
func ParseRef(ref string) (ImageRef, error) {
	base, digest, pinned := strings.Cut(ref, "@")
	t, err := name.NewTag(base)
	if err == nil && strings.Contains(base, "//") {
		err = fmt.Errorf("empty path component")
	}
	if err != nil {
		return ImageRef{}, fmt.Errorf("image reference %q is not valid: %w", ref, err)
	}
	out := ImageRef{Registry: t.RegistryStr(), Repository: t.RepositoryStr(), Tag: t.TagStr()}
	if out.Registry == name.DefaultRegistry {
		out.Registry = "docker.io"
	}
	if pinned {
		d, err := name.NewDigest(base + "@" + digest)
		if err != nil {
			return ImageRef{}, fmt.Errorf("image reference %q is not valid: %w", ref, err)
		}
		out.Digest = d.DigestStr()
	}
	return out, nil
}

func validDigest(d string) bool {
	hexPart, ok := strings.CutPrefix(d, "sha256:")
	if !ok || len(hexPart) != 64 {
		return false
	}
	_, err := hex.DecodeString(hexPart)
	return err == nil && hexPart == strings.ToLower(hexPart)
}

// blobPath is where the layout stores a blob.
func blobPath(dir, digest string) string {
	algo, hexPart, _ := strings.Cut(digest, ":")
	return filepath.Join(dir, "blobs", algo, hexPart)
}

// walk records d and everything it references in r.
func (r *repo) walk(dir string, d descriptor, depth int) error {
	if depth > 4 {
		return fmt.Errorf("manifest %s: indexes nested too deep", d.Digest)
	}
	if _, seen := r.manifests[d.Digest]; seen {
		return nil
	}
	data, err := readVerified(dir, d)
	if err != nil {
		return err
	}
	var m manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return fmt.Errorf("manifest %s: %w", d.Digest, err)
	}
	if d.MediaType == "" {
		d.MediaType = m.MediaType
	}
	r.manifests[d.Digest] = descriptor{MediaType: d.MediaType, Digest: d.Digest, Size: d.Size}
	switch d.MediaType {
	case mediaOCIIndex, mediaDockerList:
		for _, c := range m.Manifests {
			if err := r.walk(dir, c, depth+1); err != nil {
				return err
			}
		}
	case mediaOCIManifest, mediaDockerManifst:
		for _, b := range append([]descriptor{m.Config}, m.Layers...) {
			if !validDigest(b.Digest) {
				return fmt.Errorf("manifest %s: blob digest %q is not a sha256 digest", d.Digest, b.Digest)
			}
			r.blobs[b.Digest] = b.Size
		}
	default:
		return fmt.Errorf("manifest %s: media type %q is not a manifest or an index", d.Digest, d.MediaType)
	}
	return nil
}
