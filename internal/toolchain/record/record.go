// Package record holds what a toolchain build records (toolchain.json):
// the types the bundle's lock reads, apart from the code that builds.
package record

import (
	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/debs"
)

// Manifest is toolchain.json.
type Manifest struct {
	Go                string         `json:"go"`
	Epoch             int64          `json:"sourceDateEpoch"`
	KubernetesVersion string         `json:"kubernetesVersion,omitempty"`
	Binaries          []Binary       `json:"binaries"`
	Images            []ImageRecord  `json:"images"`
	Debs              []debs.Package `json:"debs,omitempty"`
	Recipes           []RecipeRecord `json:"recipes"`
	Artifacts         []Artifact     `json:"artifacts,omitempty"`
	// Roots are the Debian roots images and artifacts were made of, by
	// image ref or artifact name.
	Roots   map[string]Root `json:"roots,omitempty"`
	Actions map[string]bool `json:"-"` // recipe or image -> built now (false: cached)
}

// Binary is one built binary.
type Binary struct {
	Name   string     `json:"name"`
	Recipe string     `json:"recipe"`
	Digest cas.Digest `json:"digest"`
	Size   int64      `json:"size"`
}

// RecipeRecord is what one recipe was built from.
type RecipeRecord struct {
	Name   string `json:"name"`
	Source string `json:"source"` // module@version or local folder@version
}

// Artifact is a built artifact: its files, by name.
type Artifact struct {
	Name   string `json:"name"`
	Format string `json:"format"`
	Files  []File `json:"files"`
}

// File is one file of an artifact.
type File struct {
	Name   string     `json:"name"`
	Digest cas.Digest `json:"sha256"`
	Size   int64      `json:"size"`
}

// Root is what a Debian root was made of: its suite (read with its
// -updates at the mirror and its -security at the security mirror), its
// pinned packages' versions, and how many packages it holds.
type Root struct {
	Suite          string            `json:"suite"`
	Mirror         string            `json:"mirror"`
	SecurityMirror string            `json:"securityMirror,omitempty"`
	Pinned         map[string]string `json:"pinned,omitempty"`
	Packages       int               `json:"packages"`
}

// ImageRecord is one built image.
type ImageRecord struct {
	Ref    string     `json:"ref"`
	Digest cas.Digest `json:"digest"`
	// KindNode marks the node image of kind mode: the toolchain's layout
	// holds it, a stick does not.
	KindNode bool `json:"kindNode,omitempty"`
}

// SetRoot records the Debian root of an image or artifact.
func (m *Manifest) SetRoot(name string, r Root) {
	if m.Roots == nil {
		m.Roots = map[string]Root{}
	}
	m.Roots[name] = r
}
