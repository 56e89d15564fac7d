package firstboot

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/bootstick/bootstick/internal/pipeline"
	"github.com/bootstick/bootstick/internal/supervise"
)

func TestInterruptedAfter(t *testing.T) {
	for _, c := range []struct {
		step string
		want bool
	}{{"", false}, {"preflight", false}, {"containerd", false}, {"kubelet", true}, {"kubeadm-init", true}, {"manifests", true}, {"done", true}, {"no-such-step", false}} {
		if got := interruptedAfter(c.step, "containerd"); got != c.want {
			t.Errorf("interruptedAfter(%q, containerd) = %v, want %v", c.step, got, c.want)
		}
	}
}

// After a run cut off during kubeadm init, discovery finds the step that
// was running, and the containerd step empties containerd's image store
// (whose unpacked layers the cut may have torn) before it starts it; after
// a run cut off earlier, the store stays.
func TestTornImageStoreIsCleared(t *testing.T) {
	for _, c := range []struct {
		running string
		cleared bool
	}{{"kubeadm-init", true}, {"manifests", true}, {"containerd", false}, {"", false}} {
		p := defaultPaths(t.TempDir())
		p.Run = t.TempDir()
		root := p.containerd().Root
		layer := filepath.Join(root, "io.containerd.snapshotter.v1.overlayfs", "snapshots", "1", "fs", "pause")
		if err := os.MkdirAll(filepath.Dir(layer), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(layer, nil, 0o755); err != nil { // torn: empty
			t.Fatal(err)
		}
		st := &pipeline.State{Version: pipeline.StateVersion, Steps: []pipeline.StepRecord{{Name: "containerd", State: pipeline.StateDone}}}
		if c.running != "" {
			st.Steps = append(st.Steps, pipeline.StepRecord{Name: c.running, State: pipeline.StateRunning})
		}
		if err := os.MkdirAll(p.State, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := pipeline.SaveState(pipeline.StatePath(p.State), st); err != nil {
			t.Fatal(err)
		}
		n := discover(context.Background(), runOptions{mode: "host", bundle: "/no/bundle"}, p, supervise.New(p.services(), []string{"true"}))
		if n.interrupted != c.running {
			t.Errorf("%q: discovery found %q interrupted", c.running, n.interrupted)
		}
		if err := clearTornImages(context.Background(), n); err != nil {
			t.Fatal(err)
		}
		_, err := os.Stat(layer)
		if cleared := os.IsNotExist(err); cleared != c.cleared {
			t.Errorf("run cut off in %q: store cleared = %v, want %v", c.running, cleared, c.cleared)
		}
		if _, err := os.Stat(root); err != nil {
			t.Errorf("the store's folder itself must stay (it may be a mount): %v", err)
		}
	}
}
