package firstboot

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/bootstick/bootstick/internal/logctx"

	"github.com/bootstick/bootstick/internal/kubeadm"
	"github.com/bootstick/bootstick/internal/pipeline"
)

// kubeadmOutputs are what kubeadm init writes (and a torn init's cleanup
// removes): its certificates, kubeconfigs and static pod manifests, and
// kubelet's configuration and client certificates.
var kubeadmOutputs = []string{"/etc/kubernetes", "/var/lib/kubelet/config.yaml", kubeletFlagsFile, "/var/lib/kubelet/pki"}

// clearTornInit starts kubeadm init afresh when a power cut during an
// earlier attempt left its files damaged (kubeadm does not sync them; an
// init that finished was synced before it was recorded done). Such an
// init never finished, so nothing depends on it: its files and etcd's
// data go, and kubeadm writes them again.
func clearTornInit(ctx context.Context, n *node, pc *pipeline.Context) error {
	bad, err := kubeadm.Torn(kubeadmOutputs...)
	if err != nil || len(bad) == 0 {
		return err
	}
	logctx.From(ctx).Warn("an earlier kubeadm init was cut off and left damaged files; starting it again from scratch", "files", bad)
	if err := n.services.Stop(ctx, kubeletService); err != nil {
		return fmt.Errorf("stopping kubelet before clearing a cut-off kubeadm init: %w", err)
	}
	for _, p := range append([]string{n.paths.etcdData()}, kubeadmOutputs...) {
		if err := removeContents(p); err != nil {
			return fmt.Errorf("clearing a cut-off kubeadm init: %w", err)
		}
	}
	return nil
}

// removeContents removes a file, or everything inside a folder (the
// folder itself may be a bind mount and stays).
func removeContents(p string) error {
	fi, err := os.Lstat(p)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return os.Remove(p)
	}
	entries, err := os.ReadDir(p)
	if err != nil {
		return err
	}
	for _, en := range entries {
		if err := os.RemoveAll(filepath.Join(p, en.Name())); err != nil {
			return err
		}
	}
	return nil
}

// defaultAddress is the source address of the default route. Connecting a
// UDP socket sends nothing.
func defaultAddress() (string, error) {
	c, err := net.Dial("udp4", "192.0.2.1:9")
	if err != nil {
		return "", fmt.Errorf("finding the node's address (no default route?): %w; pass --address", err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP.String(), nil
}
