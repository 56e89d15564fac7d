package bundle

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/completeness"
	"github.com/bootstick/bootstick/internal/registry"
)

// LeftOutManifest is a manifest the bundle does not ship, and the images
// it references that the registry lacks.
type LeftOutManifest struct {
	Name    string   `json:"name"`
	Missing []string `json:"missing"`
}

// manifestImages checks the images a manifest file references against the
// registry's (refs: normalized name:tag -> image). It fails when the
// manifest pins a digest that no image of that repository has while the
// registry holds other digests of it (a stale pin). When optional, it
// returns the images the registry lacks (the manifest is then left out);
// otherwise absent images are the completeness check's to report.
func manifestImages(path string, refs map[string]LockedImage, optional bool) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("manifests: %w", err)
	}
	uses, err := completeness.ManifestImages("manifests/"+filepath.Base(path), data)
	if err != nil {
		return nil, err
	}
	byRepo := map[string][]cas.Digest{}
	for _, im := range refs {
		if r, err := registry.ParseRef(im.Ref); err == nil && im.Digest != "" {
			repo := r.Registry + "/" + r.Repository
			byRepo[repo] = append(byRepo[repo], im.Digest)
		}
	}
	missing := map[string]bool{}
	for _, u := range uses {
		present, err := imagePresent(u, refs, byRepo)
		if err != nil {
			return nil, err
		}
		if !present {
			missing[u.Image] = true
		}
	}
	if !optional || len(missing) == 0 {
		return nil, nil
	}
	out := make([]string, 0, len(missing))
	for im := range missing {
		out = append(out, im)
	}
	sort.Strings(out)
	return out, nil
}

// imagePresent reports whether the registry holds the image a manifest
// references: by repository and digest when it pins one, else by name and
// tag.
func imagePresent(u completeness.Use, refs map[string]LockedImage, byRepo map[string][]cas.Digest) (bool, error) {
	r, err := registry.ParseRef(u.Image)
	if err != nil {
		return false, fmt.Errorf("%s: %w", u.By, err)
	}
	digest := r.Digest
	if digest == "" {
		_, ok := refs[r.String()]
		return ok, nil
	}
	have := byRepo[r.Registry+"/"+r.Repository]
	for _, d := range have {
		if string(d) == digest {
			return true, nil
		}
	}
	if len(have) > 0 {
		ds := make([]string, len(have))
		for i, d := range have {
			ds[i] = string(d)
		}
		sort.Strings(ds)
		return false, fmt.Errorf("%s pins %s, but the bundle's images of %s/%s have digest %s: update the manifest's digest (or the bundle's image)",
			u.By, u.Image, r.Registry, r.Repository, strings.Join(ds, ", "))
	}
	return false, nil
}
