// Package depcheck keeps the two programs apart: firstboot (on the stick)
// links none of the builder, and mkusb (the builder) links none of the
// cluster code. go-containerregistry's depcheck is the model.
package depcheck

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/bootstick/bootstick/"

var rules = []struct {
	main      string
	forbidden []string
	why       string
}{
	{
		main: "cmd/firstboot",
		forbidden: []string{"internal/stick", "internal/toolchain", "internal/gobuild", "internal/rootfs", "internal/iso",
			"internal/fetch", "internal/payload", "internal/usbwrite", "internal/recipes", "internal/ocibuild", "internal/preflight"},
		why: "firstboot runs on the stick: the builder's code does not belong in it",
	},
	{
		main: "cmd/mkusb",
		forbidden: []string{"internal/kube", "internal/kindcluster", "internal/sitestep", "internal/firstboot", "internal/supervise",
			"k8s.io/client-go/dynamic", "k8s.io/client-go/discovery", "k8s.io/client-go/kubernetes", "sigs.k8s.io/kind"},
		why: "mkusb builds sticks offline: it never talks to a cluster",
	},
}

func TestDependencies(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("needs the go command to list dependencies")
	}
	for _, r := range rules {
		out, err := exec.Command("go", "list", "-deps", module+r.main).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", r.main, err, out)
		}
		deps := strings.Fields(string(out))
		for _, f := range r.forbidden {
			// Our own packages match exactly (toolchain/record, the
			// records the lock reads, is not the builder); others match
			// with every package below them.
			path, below := f, true
			if strings.HasPrefix(f, "internal/") {
				path, below = module+f, false
			}
			for _, d := range deps {
				if d == path || (below && strings.HasPrefix(d, path+"/")) {
					t.Errorf("%s imports %s (%s); `go list -deps` shows the chain with -json", r.main, d, r.why)
				}
			}
		}
	}
}
