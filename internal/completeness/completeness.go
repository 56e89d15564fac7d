// Package completeness checks that the offline registry holds every image
// the stick will ever pull: those the manifests name, those kubeadm pulls
// for the rendered configuration, the containerd sandbox (pause) image, and
// those the site's objects name (the caller renders the site: this package
// knows no site). The appliance must never need the network.
package completeness

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/bootstick/bootstick/internal/registry"
)

// Use is one reference to an image, and who makes it.
type Use struct {
	Image string
	By    string // e.g. "manifests/10-app.yaml: Deployment demo/app: containers[0] app"
}

// containerLists are the fields that hold containers in any pod spec, at
// any depth (Pods, Deployments, CronJobs, and custom resources that embed
// pod templates).
var containerLists = map[string]bool{"containers": true, "initContainers": true, "ephemeralContainers": true}

// ManifestImages lists the images a multi-document YAML file references.
func ManifestImages(source string, data []byte) ([]Use, error) {
	var out []Use
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for i := 0; ; i++ {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", source, i+1, err)
		}
		if doc == nil {
			continue
		}
		out = append(out, ObjectImages(source+": "+describe(doc), doc)...)
	}
	return out, nil
}

func describe(doc map[string]any) string {
	kind, _ := doc["kind"].(string)
	meta, _ := doc["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	if ns, _ := meta["namespace"].(string); ns != "" {
		name = ns + "/" + name
	}
	return strings.TrimSpace(kind + " " + name)
}

// ObjectImages lists the container images in one object (as decoded
// from YAML or JSON), naming each by who.
func ObjectImages(who string, obj map[string]any) []Use {
	var out []Use
	var walk func(v any, path string)
	walk = func(v any, path string) {
		switch t := v.(type) {
		case map[string]any:
			keys := make([]string, 0, len(t))
			for k := range t {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				p := k
				if path != "" {
					p = path + "." + k
				}
				if list, ok := t[k].([]any); ok && containerLists[k] {
					for i, c := range list {
						cm, _ := c.(map[string]any)
						if img, ok := cm["image"].(string); ok && img != "" {
							cname, _ := cm["name"].(string)
							out = append(out, Use{Image: img, By: fmt.Sprintf("%s: %s[%d] %s", who, p, i, cname)})
						}
					}
				}
				walk(t[k], p)
			}
		case []any:
			for i, e := range t {
				walk(e, fmt.Sprintf("%s[%d]", path, i))
			}
		}
	}
	walk(obj, "")
	return out
}

// MissingError names every image that is not in the registry and who
// references it.
type MissingError struct {
	Missing map[string][]string // image -> users
}

func (e *MissingError) Error() string {
	imgs := make([]string, 0, len(e.Missing))
	for im := range e.Missing {
		imgs = append(imgs, im)
	}
	sort.Strings(imgs)
	var b strings.Builder
	fmt.Fprintf(&b, "%d images are referenced but not in the offline registry (add them to the bundle's images, or to the toolchain's recipes):", len(imgs))
	for _, im := range imgs {
		fmt.Fprintf(&b, "\n  %s, referenced by:", im)
		for _, by := range e.Missing[im] {
			fmt.Fprintf(&b, "\n    %s", by)
		}
	}
	return b.String()
}

// Check fails with a MissingError when an image in uses is not among
// have (the registry's references). References are compared the way the
// registry resolves them (default registry and tag filled in); a reference
// with a digest matches an image of the same repository with that digest
// (the registry serves a digest only within its repository). haveDigests
// maps a normalized reference to its digest.
func Check(uses []Use, haveDigests map[string]string) error {
	byDigest := map[string]bool{}
	for ref, d := range haveDigests {
		if r, err := registry.ParseRef(ref); err == nil {
			byDigest[r.Registry+"/"+r.Repository+"@"+d] = true
		}
	}
	missing := map[string][]string{}
	for _, u := range uses {
		r, err := registry.ParseRef(u.Image)
		if err != nil {
			missing[u.Image] = append(missing[u.Image], u.By+" (not a valid reference)")
			continue
		}
		if r.Digest != "" {
			if !byDigest[r.Registry+"/"+r.Repository+"@"+r.Digest] {
				missing[u.Image] = append(missing[u.Image], u.By)
			}
			continue
		}
		if _, ok := haveDigests[r.String()]; !ok {
			missing[u.Image] = append(missing[u.Image], u.By)
		}
	}
	if len(missing) > 0 {
		for im := range missing {
			sort.Strings(missing[im])
		}
		return &MissingError{Missing: missing}
	}
	return nil
}
