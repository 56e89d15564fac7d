package firstboot

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/bootstick/bootstick/internal/logctx"

	"github.com/bootstick/bootstick/internal/command"

	"github.com/bootstick/bootstick/internal/pipeline"
)

// kernelSettings are the sysctls (below /proc/sys) this machine needs:
// forwarding and bridged traffic through iptables, as kubeadm's preflight
// wants, and a liberal conntrack. This machine is the router of the
// site's hosts when they have no other: a host on the provisioning
// network alone (a master on DHCP) reaches a worker's cluster address on
// another network through it, while the worker, which has a leg on the
// provisioning network too, answers directly. Conntrack here then sees
// one direction only and marks the connection's packets INVALID, which
// kube-proxy drops in its forward chain unless conntrack is liberal
// (Kubernetes PR 120412). kube-proxy reads it when it starts, after this
// step.
var kernelSettings = map[string]string{
	"net/ipv4/ip_forward": "1", "net/bridge/bridge-nf-call-iptables": "1", "net/bridge/bridge-nf-call-ip6tables": "1",
	"net/netfilter/nf_conntrack_tcp_be_liberal": "1",
}

// preflightStep checks that this machine has every program the steps run,
// naming all that are missing at once, and sets the kernel settings
// kubeadm's preflight wants.
func preflightStep(n *node) pipeline.Step {
	return pipeline.Step{
		Name: "preflight",
		Hint: "install what is missing (see the error), then run `firstboot run` again",
		Run: func(ctx context.Context, pc *pipeline.Context) error {
			var probs []string
			if os.Geteuid() != 0 {
				probs = append(probs, "firstboot run must run as root")
			}
			var missing []string
			for _, b := range []string{"kubeadm", "kubelet", "containerd", "runc", "containerd-shim-runc-v2", "iptables"} {
				if _, err := n.findBin(b); err != nil {
					missing = append(missing, b)
				}
			}
			if len(missing) > 0 {
				probs = append(probs, fmt.Sprintf("programs not found in %s: %s (Debian packages: containerd runc iptables; Kubernetes: make toolchain)",
					strings.Join(n.binDirs(), ":"), strings.Join(missing, ", ")))
			}
			missing = nil
			cniBin := n.paths.containerd().CNIBinDir
			for _, plugin := range []string{"bridge", "host-local", "portmap", "loopback"} {
				if !fileExists(filepath.Join(cniBin, plugin)) {
					missing = append(missing, plugin)
				}
			}
			if len(missing) > 0 {
				probs = append(probs, fmt.Sprintf("CNI plugins missing from %s: %s (Debian: containernetworking-plugins)", cniBin, strings.Join(missing, ", ")))
			}
			if len(probs) > 0 {
				return errors.New(strings.Join(probs, "; "))
			}
			// Kernel settings kubeadm's preflight wants; set, not just checked.
			for _, mod := range []string{"br_netfilter", "overlay", "nf_conntrack"} {
				if _, err := command.Run(ctx, command.Options{Tail: 3}, "modprobe", mod); err != nil {
					logctx.From(ctx).Warn("loading a kernel module", "module", mod, "err", err)
				}
			}
			for k, v := range kernelSettings {
				if err := os.WriteFile("/proc/sys/"+k, []byte(v), 0o644); err != nil {
					logctx.From(ctx).Warn("setting sysctl", "key", k, "err", err)
				}
			}
			return nil
		},
	}
}
