// Package record holds what a toolchain build records (toolchain.json):
// the types the bundle's lock reads, apart from the code that builds.
package record

import (
	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/debs"
)

// Manifest is toolchain.json.
type Manifest struct {
	Go                string          `json:"go"`
	Epoch             int64           `json:"sourceDateEpoch"`
	KubernetesVersion string          `json:"kubernetesVersion,omitempty"`
	Binaries          []Binary        `json:"binaries"`
	Images            []ImageRecord   `json:"images"`
	Debs              []debs.Package  `json:"debs,omitempty"`
	Recipes           []RecipeRecord  `json:"recipes"`
	Actions           map[string]bool `json:"-"` // recipe or image -> built now (false: cached)
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

// ImageRecord is one built image.
type ImageRecord struct {
	Ref    string     `json:"ref"`
	Digest cas.Digest `json:"digest"`
}
