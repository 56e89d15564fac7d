package bundle

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/completeness"
	"github.com/bootstick/bootstick/internal/toolchain"
)

func deployment(name string, images ...string) string {
	var b strings.Builder
	b.WriteString("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: " + name + ", namespace: x}\nspec:\n  template:\n    spec:\n      containers:\n")
	for i, im := range images {
		b.WriteString("      - name: c" + string(rune('0'+i)) + "\n        image: " + im + "\n")
	}
	return b.String()
}

// TestManifestsShipOnlyWithTheirImages: a manifest of
// manifests.ifImagesPresent ships only when the registry holds every image
// it names (by repository and digest, or by name and tag); otherwise the
// lock leaves it out naming the missing images. Any other manifest ships
// regardless, so the completeness check still fails on its missing images.
// A manifest pinning a digest the registry's image of that repository does
// not have is an error either way.
func TestManifestsShipOnlyWithTheirImages(t *testing.T) {
	dOwn := "sha256:" + strings.Repeat("5", 64)
	dUp := "sha256:" + strings.Repeat("6", 64)
	dOther := "sha256:" + strings.Repeat("7", 64)
	toolchainImages := []toolchain.ImageRecord{
		{Ref: "example.test/pause:1", Digest: cas.Digest("sha256:" + strings.Repeat("4", 64))},
		{Ref: "registry.example.test/own:v1", Digest: cas.Digest(dOwn)},
	}
	tests := []struct {
		name      string
		manifests map[string]string
		optional  []string
		images    string // the bundle's images: (YAML), pinned so no lookup happens
		ship      []string
		leftOut   map[string][]string
		complete  string // "" or a substring of the completeness error
		err       string // a substring of Resolve's error
	}{
		{
			name: "optional manifests without their images are left out",
			manifests: map[string]string{
				"30-own.yaml":      deployment("own", "registry.example.test/own@"+dOwn),
				"31-upstream.yaml": deployment("up", "upstream.example.test/op:v1@"+dUp),
				"32-both.yaml":     deployment("both", "registry.example.test/own@"+dOwn, "upstream.example.test/ironic:v2@"+dUp, "example.test/pause:1"),
			},
			optional: []string{"31-upstream.yaml", "32-both.yaml"},
			ship:     []string{"30-own.yaml"},
			leftOut: map[string][]string{
				"31-upstream.yaml": {"upstream.example.test/op:v1@" + dUp},
				"32-both.yaml":     {"upstream.example.test/ironic:v2@" + dUp},
			},
		},
		{
			name: "optional manifests ship once the bundle has their images",
			manifests: map[string]string{
				"30-own.yaml":      deployment("own", "registry.example.test/own@"+dOwn),
				"31-upstream.yaml": deployment("up", "upstream.example.test/op:v1@"+dUp),
				"32-tag.yaml":      deployment("tag", "upstream.example.test/op:v1"),
			},
			optional: []string{"31-upstream.yaml", "32-tag.yaml"},
			images:   "images: [{ref: 'upstream.example.test/op:v1', digest: '" + dUp + "'}]\n",
			ship:     []string{"30-own.yaml", "31-upstream.yaml", "32-tag.yaml"},
		},
		{
			name: "a shipped manifest must still have all its images",
			manifests: map[string]string{
				"30-own.yaml":      deployment("own", "registry.example.test/own@"+dOwn),
				"31-upstream.yaml": deployment("up", "upstream.example.test/op:v1@"+dUp),
			},
			ship:     []string{"30-own.yaml", "31-upstream.yaml"},
			complete: "upstream.example.test/op:v1@" + dUp + ", referenced by:\n    manifests/31-upstream.yaml: Deployment x/up",
		},
		{
			name:      "a stale digest of an image the bundle has is an error",
			manifests: map[string]string{"30-own.yaml": deployment("own", "registry.example.test/own@"+dOther)},
			err:       "manifests/30-own.yaml: Deployment x/own: spec.template.spec.containers[0] c0 pins registry.example.test/own@" + dOther + ", but the bundle's images of registry.example.test/own have digest " + dOwn,
		},
		{
			name:      "a stale digest is an error in an optional manifest too",
			manifests: map[string]string{"31-upstream.yaml": deployment("up", "upstream.example.test/op:v1@"+dOther)},
			optional:  []string{"31-upstream.yaml"},
			images:    "images: [{ref: 'upstream.example.test/op:v1', digest: '" + dUp + "'}]\n",
			err:       "pins upstream.example.test/op:v1@" + dOther + ", but the bundle's images of upstream.example.test/op have digest " + dUp,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			mdir := filepath.Join(dir, "m")
			if err := os.Mkdir(mdir, 0o755); err != nil {
				t.Fatal(err)
			}
			for n, body := range tt.manifests {
				write(t, mdir, n, body)
			}
			write(t, dir, "recipes.yaml", "x")
			opt := ""
			if len(tt.optional) > 0 {
				opt = ", ifImagesPresent: [" + strings.Join(tt.optional, ", ") + "]"
			}
			f := write(t, dir, "b.yaml", head+"kubernetes: {version: v1.34.4, recipes: recipes.yaml}\nmanifests: {dir: m"+opt+"}\n"+tt.images)
			b, err := Load(f)
			if err != nil {
				t.Fatal(err)
			}
			r := fakeResolver()
			tc := r.Toolchain
			r.Toolchain = func(ctx context.Context, recipes string) (*toolchain.Manifest, error) {
				m, err := tc(ctx, recipes)
				if err == nil {
					m.Images = toolchainImages
				}
				return m, err
			}
			l, err := Resolve(context.Background(), b, nil, r)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || !strings.Contains(err.Error(), "b.yaml") {
					t.Fatalf("Resolve error = %v\nwant the bundle file and %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var shipped []string
			for _, m := range l.Manifests {
				shipped = append(shipped, m.Name)
			}
			if !slices.Equal(shipped, tt.ship) {
				t.Errorf("shipped %v, want %v", shipped, tt.ship)
			}
			left := map[string][]string{}
			for _, m := range l.LeftOut {
				left[m.Name] = m.Missing
			}
			if len(left) != len(tt.leftOut) {
				t.Errorf("left out %v, want %v", left, tt.leftOut)
			}
			for n, want := range tt.leftOut {
				if !slices.Equal(left[n], want) {
					t.Errorf("left out %s missing %v, want %v", n, left[n], want)
				}
			}
			// The lock round-trips its left-out manifests.
			back, err := ParseLock("x.lock", l.Marshal())
			if err != nil {
				t.Fatal(err)
			}
			if len(back.LeftOut) != len(l.LeftOut) {
				t.Errorf("round trip lost leftOut: %v", back.LeftOut)
			}

			// The completeness check over what ships.
			var uses []completeness.Use
			for _, m := range l.Manifests {
				data, err := os.ReadFile(filepath.Join(dir, m.Path))
				if err != nil {
					t.Fatal(err)
				}
				u, err := completeness.ManifestImages("manifests/"+m.Name, data)
				if err != nil {
					t.Fatal(err)
				}
				uses = append(uses, u...)
			}
			have := map[string]string{}
			for ref, im := range l.ImageRefs() {
				have[ref] = string(im.Digest)
			}
			err = completeness.Check(uses, have)
			switch {
			case tt.complete == "" && err != nil:
				t.Errorf("completeness: %v", err)
			case tt.complete != "" && (err == nil || !strings.Contains(err.Error(), tt.complete)):
				t.Errorf("completeness error = %v\nwant %q", err, tt.complete)
			}
		})
	}
}

func TestBadIfImagesPresent(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "m"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "m"), "31-bmo.yaml", deployment("bmo", "h.invalid/app:1"))
	write(t, dir, "recipes.yaml", "x")
	for _, tc := range []struct{ name, list, want string }{
		{"not in the folder", "[31-bmo.yaml, 32-ironic.yaml]", "manifests.ifImagesPresent[1]: Not found: \"32-ironic.yaml (not in manifests.dir m)\""},
		{"a path", "[../x.yaml]", "manifests.ifImagesPresent[0]: Invalid value"},
		{"not yaml", "[31-bmo.json]", "manifests.ifImagesPresent[0]: Invalid value"},
		{"twice", "[31-bmo.yaml, 31-bmo.yaml]", "manifests.ifImagesPresent[1]: Duplicate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := write(t, dir, "b.yaml", head+"kubernetes: {version: v1.34.4, recipes: recipes.yaml}\nmanifests: {dir: m, ifImagesPresent: "+tc.list+"}\n")
			_, err := Load(f)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "b.yaml") {
				t.Errorf("error = %v\nwant the file and %q", err, tc.want)
			}
		})
	}
}

// TestDefaultBundleLeavesOutUpstreamOperators: the default bundle cannot
// carry the baremetal-operator or Ironic images, so it ships the BPA's
// Deployment and leaves theirs out, naming the images.
func TestDefaultBundleLeavesOutUpstreamOperators(t *testing.T) {
	b, err := Load("../../bundle/default.yaml")
	if err != nil {
		t.Fatal(err)
	}
	l, err := Resolve(context.Background(), b, nil, fakeResolver())
	if err != nil {
		t.Fatal(err)
	}
	var shipped []string
	for _, m := range l.Manifests {
		shipped = append(shipped, m.Name)
	}
	if !slices.Contains(shipped, "30-bpa.yaml") || slices.Contains(shipped, "31-baremetal-operator.yaml") || slices.Contains(shipped, "32-ironic.yaml") {
		t.Errorf("shipped %v", shipped)
	}
	got := map[string]string{}
	for _, m := range l.LeftOut {
		got[m.Name] = strings.Join(m.Missing, " ")
	}
	if !strings.HasPrefix(got["31-baremetal-operator.yaml"], "quay.io/metal3-io/baremetal-operator:") ||
		!strings.HasPrefix(got["32-ironic.yaml"], "quay.io/metal3-io/ironic:") || len(got) != 2 {
		t.Errorf("left out %v", got)
	}
}
