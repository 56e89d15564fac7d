package firstboot

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/bootstick/bootstick/internal/logctx"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bootstick/bootstick/internal/atomicfile"
	"github.com/bootstick/bootstick/internal/command"
	"github.com/bootstick/bootstick/internal/kube"
	"github.com/bootstick/bootstick/internal/kubeadm"
	"github.com/bootstick/bootstick/internal/pipeline"
	"github.com/bootstick/bootstick/internal/supervise"
)

// kubeadmInitStep makes this machine a one-node control plane. Its Done
// check never changes anything: it asks the API server (kubelet runs, the
// kubelet step saw to that) whether a finished init is there.
func kubeadmInitStep(n *node) pipeline.Step {
	return pipeline.Step{
		Name: "kubeadm-init",
		Hint: "see the kubelet log /run/bootstick/services/bootstick-kubelet.log and kubeadm's in " + n.paths.commandLogs() + "; rerunning is safe",
		Done: func(ctx context.Context, pc *pipeline.Context) (bool, error) { return initialised(ctx, pc) },
		Run: func(ctx context.Context, pc *pipeline.Context) error {
			cfg, err := kubeadmConfig(n)
			if err != nil {
				return err
			}
			if created, err := kubeadm.EnsureEncryptionConfig(n.paths.encryptionConfig()); err != nil {
				return err
			} else if created {
				logctx.From(ctx).Info("generated the key that encrypts Secrets", "file", n.paths.encryptionConfig())
			}
			// The API server and etcd wait out a stall of minutes
			// before their restart: on a machine short of CPU a restart
			// turned one stall into a crash loop (kubeadm.StallPatches).
			if err := kubeadm.WriteStallPatches(cfg.PatchesDir); err != nil {
				return err
			}
			data, err := kubeadm.Render(cfg)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(filepath.Dir(n.paths.kubeadmConfig()), 0o755); err != nil {
				return err
			}
			if err := atomicfile.Write(n.paths.kubeadmConfig(), data, 0o600); err != nil {
				return err
			}
			if pc.Record.Attempts > 1 && pc.Record.Completed.IsZero() {
				if err := clearTornInit(ctx, n, pc); err != nil {
					return err
				}
			}
			flags := "--config=" + n.paths.kubeadmConfig()
			ignore := []string{"SystemVerification", "Swap"}
			if pc.Record.Attempts > 1 {
				ignore = append(ignore, resumedInitChecks(n.paths.etcdData())...)
			}
			if err := runKubeadm(ctx, n, "init", "phase", "preflight", flags, "--ignore-preflight-errors="+strings.Join(ignore, ",")); err != nil {
				return err
			}
			if err := runKubeadm(ctx, n, "init", "phase", "kubelet-start", flags); err != nil {
				return err
			}
			if err := startKubelet(ctx, n); err != nil {
				return err
			}
			if err := apiServerFirst(ctx, n, flags); err != nil {
				return err
			}
			return runKubeadm(ctx, n, "init", flags, "--skip-phases="+kubeadm.InitSkipPhases, "--skip-token-print")
		},
	}
}

// apiServerFirst starts etcd and the API server alone, and waits until
// the API server is ready (kubeadm.APIServerFirst says why).
func apiServerFirst(ctx context.Context, n *node, flags string) error {
	start := time.Now()
	for _, phase := range kubeadm.APIServerFirst {
		if err := runKubeadm(ctx, n, append(append([]string{"init", "phase"}, phase...), flags)...); err != nil {
			return err
		}
	}
	c, err := kube.Load(adminConf)
	if err != nil {
		return err
	}
	if err := c.WaitReady(ctx, n.opts.timeout); err != nil {
		return fmt.Errorf("etcd and the API server, started before the rest of the control plane: %w", err)
	}
	logctx.From(ctx).Info("the API server is ready; kubeadm init starts the controller manager and the scheduler", "took", time.Since(start).Round(100*time.Millisecond))
	return nil
}

// resumedInitChecks are the preflight checks a resumed init fails on its
// own earlier work, and only those: the ports of the control plane it
// started, its static pod manifests and etcd's data.
func resumedInitChecks(etcdData string) []string {
	checks := []string{"Port-6443", "Port-10259", "Port-10257", "Port-10250", "Port-2379", "Port-2380",
		"DirAvailable-" + strings.ReplaceAll(etcdData, "/", "-")}
	for _, c := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd"} {
		checks = append(checks, "FileAvailable--etc-kubernetes-manifests-"+c+".yaml")
	}
	return checks
}

// initialised reports whether a finished kubeadm init is in place: the
// API server answers (checked with the cluster's CA) and the addons that
// init installs last are there. A control plane recorded as initialised
// is never initialised again because it is slow to answer (a busy or
// emulated machine): the check fails this run instead, and the next run
// (systemd restarts firstboot) looks again. Completed survives a failed
// check, so a run after this one still knows the init finished once.
func initialised(ctx context.Context, pc *pipeline.Context) (bool, error) {
	if !fileExists(adminConf) {
		return false, nil
	}
	c, err := kube.Load(adminConf)
	if err != nil {
		return false, nil
	}
	recordedDone := !pc.Record.Completed.IsZero()
	if err := c.WaitReady(ctx, time.Minute); err != nil {
		if recordedDone {
			return false, fmt.Errorf("the API server does not answer yet (%v); kubeadm init finished before, so it is not run again: try again when the node is less busy", err)
		}
		return false, nil
	}
	// kubeadm writes admin.conf and starts the API server long before its
	// last phases (upload-config, bootstrap token, CoreDNS, kube-proxy):
	// an API that answers is not a finished init. The addons come last.
	_, err = c.CS.AppsV1().DaemonSets("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{})
	if err == nil {
		_, err = c.CS.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
	}
	if err != nil && recordedDone {
		return false, fmt.Errorf("kubeadm init finished before, but its addons cannot be read (%v): not running it again", err)
	}
	return err == nil, nil
}

// runKubeadm runs kubeadm with kubelet on its PATH; the whole output goes
// to the command log.
func runKubeadm(ctx context.Context, n *node, args ...string) error {
	bin, err := n.findBin("kubeadm")
	if err != nil {
		return err
	}
	_, err = command.Run(ctx, command.Options{Log: filepath.Join(n.paths.commandLogs(), "kubeadm.log"), Env: n.toolEnv()},
		append([]string{bin}, args...)...)
	return err
}

// kubeadmConfig is the one-node cluster's kubeadm configuration, with the
// bundle's images.
func kubeadmConfig(n *node) (kubeadm.Config, error) {
	api, err := n.bundle.findImage("kube-apiserver")
	if err != nil {
		return kubeadm.Config{}, err
	}
	etcd, err := n.bundle.findImage("etcd")
	if err != nil {
		return kubeadm.Config{}, err
	}
	dns, err := n.bundle.findImage("coredns")
	if err != nil {
		return kubeadm.Config{}, err
	}
	addr := n.opts.address
	if addr == "" {
		if addr, err = defaultAddress(); err != nil {
			return kubeadm.Config{}, err
		}
	}
	node := n.opts.nodeName
	if node == "" {
		h, err := os.Hostname()
		if err != nil {
			return kubeadm.Config{}, fmt.Errorf("host name: %w", err)
		}
		node = strings.ToLower(h)
	}
	return kubeadm.Config{
		KubernetesVersion: api.Tag, NodeName: node, AdvertiseAddress: addr,
		PodSubnet: n.opts.podSubnet, ServiceSubnet: n.opts.svcSubnet,
		CRISocket:       "unix://" + n.paths.containerd().Address,
		ImageRepository: api.Registry, EtcdImageTag: etcd.Tag, CoreDNSImageTag: dns.Tag,
		EtcdDataDir: n.paths.etcdData(), EncryptionConfigPath: n.paths.encryptionConfig(),
		CgroupDriver: kubeadm.CgroupDriver(supervise.SystemdIsPID1()),
		PatchesDir:   n.paths.kubeadmPatches(),
	}, nil
}
