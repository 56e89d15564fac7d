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
	"github.com/bootstick/bootstick/internal/toolchain/record"
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

// TestDefaultBundleShipsMetal3: the default bundle ships every manifest,
// the Metal3 ones among them, each naming the toolchain's images by the
// digest the lock holds, and locks the toolchain's artifacts (the deploy
// ramdisk, the compute OS image) under os-images.
func TestDefaultBundleShipsMetal3(t *testing.T) {
	b, err := Load("../../bundle/default.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r := fakeResolver()
	digest := func(c string) cas.Digest { return cas.Digest("sha256:" + strings.Repeat(c, 64)) }
	r.Toolchain = func(ctx context.Context, recipes string) (*toolchain.Manifest, error) {
		return &toolchain.Manifest{
			Go: "go1.26", KubernetesVersion: "v1.34.4",
			Binaries: append([]toolchain.Binary{{Name: "kubeadm", Digest: digest("1")}, {Name: "kubelet", Digest: digest("2")}, {Name: "kubectl", Digest: digest("3")}, {Name: "flannel", Digest: digest("5")}},
				fakeCNIPlugins()...),
			Images: []toolchain.ImageRecord{
				{Ref: "registry.bootstick.dev/bpa-operator:v0.1.0", Digest: digest("b")},
				{Ref: "registry.bootstick.dev/baremetal-operator:v0.13.2", Digest: digest("c")},
				{Ref: "registry.bootstick.dev/ironic:29.0.5", Digest: digest("d")},
			},
			Artifacts: []record.Artifact{
				{Name: "ironic-python-agent", Format: "ramdisk", Files: []record.File{
					{Name: "ironic-python-agent.kernel", Digest: digest("e"), Size: 5}, {Name: "ironic-python-agent.initramfs", Digest: digest("f"), Size: 6}}},
				{Name: "debian-13-compute", Format: "qcow2", Files: []record.File{{Name: "debian-13-compute.qcow2", Digest: digest("9"), Size: 7}}},
			},
			Roots: map[string]record.Root{"registry.bootstick.dev/ironic:29.0.5": {Suite: "trixie", Pinned: map[string]string{"ironic-common": "1:29.0.5-0+deb13u3"}}},
		}, nil
	}
	l, err := Resolve(context.Background(), b, nil, r)
	if err != nil {
		t.Fatal(err)
	}
	var shipped []string
	for _, m := range l.Manifests {
		shipped = append(shipped, m.Name)
		data, err := l.PinnedManifest(b, m)
		if err != nil {
			t.Fatal(err)
		}
		if cas.DigestOf(data) != m.SHA256 {
			t.Errorf("%s: the lock pins %s, the pinned manifest is %s", m.Name, m.SHA256, cas.DigestOf(data))
		}
		for name, d := range map[string]cas.Digest{"30-bpa.yaml": digest("b"), "31-baremetal-operator.yaml": digest("c"), "32-ironic.yaml": digest("d")} {
			if m.Name == name && !strings.Contains(string(data), "@"+string(d)) {
				t.Errorf("%s does not name its image by digest %s", name, d)
			}
		}
	}
	for _, want := range []string{"30-bpa.yaml", "31-baremetal-operator.yaml", "32-ironic.yaml"} {
		if !slices.Contains(shipped, want) {
			t.Errorf("%s does not ship: %v", want, shipped)
		}
	}
	if len(l.LeftOut) != 0 {
		t.Errorf("left out %v", l.LeftOut)
	}
	files := l.PayloadFiles()
	for name, d := range map[string]cas.Digest{"os-images/ironic-python-agent.kernel": digest("e"),
		"os-images/ironic-python-agent.initramfs": digest("f"), "os-images/debian-13-compute.qcow2": digest("9")} {
		if files[name] != d {
			t.Errorf("lock: %s is %q, want %s", name, files[name], d)
		}
	}
	if l.Kubernetes.Roots["registry.bootstick.dev/ironic:29.0.5"].Pinned["ironic-common"] == "" {
		t.Errorf("lock records no Debian roots: %+v", l.Kubernetes.Roots)
	}
	imgs := l.BundledImages()
	if len(imgs) != 1 || imgs[0].File != "debian-13-compute.qcow2" || imgs[0].Format != "qcow2" {
		t.Errorf("bundled OS images %+v, want the compute image", imgs)
	}
}

// TestPinImages: only image lines by tag whose image the lock holds change;
// digests already there, other images, comments and layout stay.
func TestPinImages(t *testing.T) {
	d := cas.Digest("sha256:" + strings.Repeat("a", 64))
	refs := map[string]LockedImage{"example.test/app:1": {Ref: "example.test/app:1", Digest: d}}
	in := "# image: example.test/app:1 in a comment\nspec:\n  containers:\n  - image: example.test/app:1  # ours\n    name: a\n  - name: b\n    image: \"example.test/app:1\"\n  - image: example.test/app:1@sha256:" + strings.Repeat("b", 64) + "\n  - image: example.test/other:2\n"
	want := "# image: example.test/app:1 in a comment\nspec:\n  containers:\n  - image: example.test/app:1@" + string(d) + "  # ours\n    name: a\n  - name: b\n    image: \"example.test/app:1@" + string(d) + "\"\n  - image: example.test/app:1@sha256:" + strings.Repeat("b", 64) + "\n  - image: example.test/other:2\n"
	if got := string(PinImages([]byte(in), refs)); got != want {
		t.Errorf("PinImages:\n%s\nwant:\n%s", got, want)
	}
}
