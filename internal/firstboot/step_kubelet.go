package firstboot

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/bootstick/bootstick/internal/logctx"

	"github.com/bootstick/bootstick/internal/pipeline"
	"github.com/bootstick/bootstick/internal/supervise"
)

// kubelet's files, as kubeadm writes them.
const (
	kubeletFlagsFile  = "/var/lib/kubelet/kubeadm-flags.env"
	kubeletKubeconfig = "/etc/kubernetes/kubelet.conf"
)

// kubeletStep starts kubelet again after a reboot (the service does not
// survive one): on a first boot kubeadm has not configured it yet and
// kubeadm-init starts it.
func kubeletStep(n *node) pipeline.Step {
	return pipeline.Step{
		Name: "kubelet",
		Hint: "see the kubelet log /run/bootstick/services/bootstick-kubelet.log",
		Done: func(ctx context.Context, pc *pipeline.Context) (bool, error) {
			if !fileExists(kubeletFlagsFile) {
				return pc.Record.State == pipeline.StateDone, nil
			}
			return n.services.Active(ctx, kubeletService)
		},
		Run: func(ctx context.Context, pc *pipeline.Context) error {
			if !fileExists(kubeletFlagsFile) || !fileExists(kubeletKubeconfig) {
				logctx.From(ctx).Info("kubeadm has not configured kubelet yet; kubeadm-init starts it")
				return nil
			}
			return startKubelet(ctx, n)
		},
	}
}

// startKubelet runs kubelet the way kubeadm's systemd drop-in would, with
// the flags kubeadm wrote to kubeadm-flags.env.
func startKubelet(ctx context.Context, n *node) error {
	bin, err := n.findBin("kubelet")
	if err != nil {
		return err
	}
	args := []string{bin,
		"--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
		"--kubeconfig=" + kubeletKubeconfig,
		"--config=/var/lib/kubelet/config.yaml"}
	extra, err := kubeletFlags(kubeletFlagsFile)
	if err != nil {
		return err
	}
	return n.services.Start(ctx, supervise.Service{Name: kubeletService, Description: "kubelet for bootstick", Command: append(args, extra...)})
}

// kubeletFlags reads KUBELET_KUBEADM_ARGS="..." from kubeadm's env file.
func kubeletFlags(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading kubelet flags: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "KUBELET_KUBEADM_ARGS="); ok {
			return strings.Fields(strings.Trim(v, `"`)), nil
		}
	}
	return nil, sc.Err()
}
