package bundle

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
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
func manifestImages(path string, data []byte, refs map[string]LockedImage, optional bool) ([]string, error) {
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

// imageLine is a manifest line that names an image: "image: REF" in a
// mapping or as a list item, the value bare or quoted, maybe commented.
var imageLine = regexp.MustCompile(`^(\s*(?:-\s+)?image:\s*)(["']?)([^\s"'#]+)(["']?)(\s*(?:#.*)?)$`)

// PinImages names each image a manifest references by tag only by the
// digest the lock holds for it (REF becomes REF@sha256:...), so a manifest
// ships the exact image this build made and nobody edits a digest by hand.
// References that carry a digest already, or whose image the lock lacks,
// stay as they are (the completeness check reports those). Only the image
// lines change: comments and layout are kept.
func PinImages(data []byte, refs map[string]LockedImage) []byte {
	lines := strings.SplitAfter(string(data), "\n")
	for i, l := range lines {
		body := strings.TrimRight(l, "\r\n")
		m := imageLine.FindStringSubmatch(body)
		if m == nil || m[2] != m[4] {
			continue
		}
		r, err := registry.ParseRef(m[3])
		if err != nil || r.Digest != "" {
			continue
		}
		im, ok := refs[r.String()]
		if !ok || im.Digest == "" {
			continue
		}
		lines[i] = m[1] + m[2] + m[3] + "@" + string(im.Digest) + m[4] + m[5] + l[len(body):]
	}
	return []byte(strings.Join(lines, ""))
}

// PinnedManifest is a locked manifest as it ships: its source with the
// lock's image digests (PinImages).
func (l *Lock) PinnedManifest(b *Bundle, m LockedFile) ([]byte, error) {
	data, err := os.ReadFile(b.Path(m.Path))
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", m.Name, err)
	}
	return PinImages(data, l.ImageRefs()), nil
}
