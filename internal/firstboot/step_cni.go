package firstboot

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"

	"github.com/bootstick/bootstick/internal/atomicfile"
	"github.com/bootstick/bootstick/internal/pipeline"
)

// cniStep writes the pod network's configuration: one bridge over the pod
// CIDR, enough for one node.
func cniStep(n *node) pipeline.Step {
	return pipeline.Step{
		Name: "cni",
		Run: func(ctx context.Context, pc *pipeline.Context) error {
			dir := n.paths.cniConfDir()
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			return atomicfile.Write(filepath.Join(dir, "10-bootstick.conflist"), cniConfig(n.opts.podSubnet), 0o644)
		},
	}
}

// cniConfig is a single-node bridge network over the pod CIDR.
func cniConfig(podSubnet string) []byte {
	cfg := map[string]any{
		"cniVersion": "0.4.0",
		"name":       "bootstick",
		"plugins": []any{
			map[string]any{"type": "bridge", "bridge": cniBridge, "isGateway": true, "ipMasq": true, "hairpinMode": true,
				"ipam": map[string]any{"type": "host-local", "ranges": [][]map[string]string{{{"subnet": podSubnet}}},
					"routes": []map[string]string{{"dst": "0.0.0.0/0"}}}},
			map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
		},
	}
	data, _ := json.MarshalIndent(cfg, "", "  ")
	return append(data, '\n')
}
