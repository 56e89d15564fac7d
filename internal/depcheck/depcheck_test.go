// Package depcheck keeps the two programs apart: firstboot (on the stick)
// links none of the builder, and mkusb (the builder) links none of the
// cluster code. It also keeps packages on their floor: kube knows no site,
// rendered object or metal3 and BPA kind; the bundle and the completeness
// check know no site; and the registry links nothing but the standard
// library and the reference parser it names.
// go-containerregistry's depcheck is the model.
package depcheck

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/bootstick/bootstick/internal/command"
)

const module = "github.com/bootstick/bootstick/"

var rules = []struct {
	// pkg is a program or a package, below the module.
	pkg       string
	forbidden []string
	// only, when set, lists every package outside the standard library
	// that pkg may link (pkg itself aside); forbidden is then unused.
	only []string
	why  string
}{
	{
		pkg: "cmd/firstboot",
		forbidden: []string{"internal/stick", "internal/toolchain", "internal/gobuild", "internal/rootfs", "internal/iso",
			"internal/fetch", "internal/payload", "internal/usbwrite", "internal/recipes", "internal/ocibuild", "internal/preflight", "internal/zstdblob"},
		why: "firstboot runs on the stick: the builder's code does not belong in it",
	},
	{
		// The metal3 apis module (v0.13.2) is types only: nothing that
		// talks to a cluster comes in with it, neither our own packages
		// nor client-go's clients, REST mapper and kubeconfig loading, nor
		// kind.
		pkg: "cmd/mkusb",
		forbidden: []string{"internal/kube", "internal/hoststate", "internal/kindcluster", "internal/sitestep", "internal/firstboot", "internal/supervise",
			"k8s.io/client-go/dynamic/...", "k8s.io/client-go/restmapper", "k8s.io/client-go/discovery/cached/...",
			"k8s.io/client-go/tools/clientcmd", "k8s.io/client-go/kubernetes/...", "k8s.io/client-go/rest",
			"sigs.k8s.io/controller-runtime/pkg/client/...", "sigs.k8s.io/kind/..."},
		why: "mkusb builds sticks offline: it never talks to a cluster",
	},
	{
		// kube applies, waits and lists; the read models of the site's
		// kinds (hoststate) and the rendering of its objects build on it.
		pkg:       "internal/kube",
		forbidden: []string{"internal/render", "internal/site", "internal/bpa/...", "github.com/metal3-io/..."},
		why:       "kube is a plain client: it knows no site and no kind of metal3's or the BPA's",
	},
	{
		// The bundle says what the stick carries (its OS images as
		// osimage.Image); the site picks from that, never the other way
		// round. completeness, which the bundle uses to read manifests'
		// images, takes the site's objects already rendered.
		pkg:       "internal/bundle",
		forbidden: []string{"internal/site", "internal/render"},
		why:       "the bundle knows no site: a site is checked against the bundle, not the bundle against a site",
	},
	{
		pkg:       "internal/completeness",
		forbidden: []string{"internal/site", "internal/render"},
		why:       "completeness checks images in objects it is given; the caller renders the site",
	},
	{
		// The registry serves the stick's layout before anything else
		// runs. It needs no package of ours: only the standard library and
		// go-containerregistry's reference parser (with the digest package
		// that parser links).
		pkg:  "internal/registry",
		only: []string{"github.com/google/go-containerregistry/pkg/name", "github.com/opencontainers/go-digest"},
		why:  "the registry stands on its own: it links no bootstick package and no library beyond reference parsing",
	},
}

func TestDependencies(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("needs the go command to list dependencies")
	}
	for _, r := range rules {
		if r.only != nil {
			checkOnly(t, r.pkg, r.only, r.why)
			continue
		}
		out, err := command.Output(context.Background(), command.Options{}, "go", "list", "-deps", module+r.pkg)
		if err != nil {
			t.Fatalf("go list -deps %s: %v", r.pkg, err)
		}
		deps := strings.Fields(string(out))
		for _, f := range r.forbidden {
			// A path matches exactly (toolchain/record, the records the
			// lock reads, is not the builder); one ending in /... matches
			// every package below it too.
			path, below := strings.CutSuffix(f, "/...")
			if strings.HasPrefix(path, "internal/") {
				path = module + path
			}
			for _, d := range deps {
				if d == path || (below && strings.HasPrefix(d, path+"/")) {
					t.Errorf("%s imports %s (%s); `go list -deps` shows the chain with -json", r.pkg, d, r.why)
				}
			}
		}
	}
}

// checkOnly fails for every package outside the standard library that pkg
// links and only does not list.
func checkOnly(t *testing.T, pkg string, only []string, why string) {
	t.Helper()
	out, err := command.Output(context.Background(), command.Options{}, "go", "list", "-deps",
		"-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", module+pkg)
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	allowed := map[string]bool{module + pkg: true}
	for _, o := range only {
		allowed[o] = true
	}
	for _, d := range strings.Fields(string(out)) {
		if !allowed[d] {
			t.Errorf("%s imports %s (%s); `go list -deps` shows the chain with -json", pkg, d, why)
		}
	}
}
