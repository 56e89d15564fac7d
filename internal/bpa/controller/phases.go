package controller

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	metal3 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/bootstick/bootstick/internal/bpa/install"
	bpa "github.com/bootstick/bootstick/internal/bpa/v1alpha1"
)

// The phases' work on a host: connect and install (prepare), init or
// join (makeNode), and Ready (readyPhase).

// prepare connects to h, checks it against its requirements (fit.go)
// and installs the packages, unless h waits out a backoff. It reports
// whether h is installed.
func (x *run) prepare(ctx context.Context, h *bpa.HostStatus) bool {
	if x.waiting(h) {
		return false
	}
	// The site's address (or the BareMetalHost's annotation's), each
	// pass: the ConfigMap may have changed.
	x.mu.Lock()
	h.Address = x.cfg.Hosts[h.Name].Address
	if h.Address == "" {
		h.Address = bootAddress(x.bmhs[h.BareMetalHost], h.MACAddress)
	}
	x.mu.Unlock()
	if !x.step(ctx, h, bpa.PhaseConnect, nil) {
		return false
	}
	if !x.checkFit(ctx, h) {
		return false // nothing runs on a host that lacks what its role requires
	}
	return x.step(ctx, h, bpa.PhaseInstall, func(ctx context.Context, c install.Executor) error {
		t := install.Target{Name: h.Name, Address: hostOnly(h.Address), Master: h.Role == RoleMaster}
		var secrets []string
		if t.Master {
			t.EncryptionKey = x.encKey
			secrets = []string{base64.StdEncoding.EncodeToString(x.encKey)}
		}
		script, err := install.InstallScript(x.cfg, x.cl, t)
		if err != nil {
			return err
		}
		_, err = c.Run(ctx, install.Job{Name: bpa.PhaseInstall, Script: script, Secrets: secrets, Deadline: PhaseDeadlines[bpa.PhaseInstall]})
		return err
	})
}

// makeNode runs kubeadm init on an installed h (via nil: h makes the
// cluster), or joins it through master via.
func (x *run) makeNode(ctx context.Context, h, via *bpa.HostStatus) bool {
	if inCluster(h) {
		return true
	}
	if via == nil {
		return x.step(ctx, h, bpa.PhaseInit, func(ctx context.Context, c install.Executor) error { return x.initCluster(ctx, c, h) })
	}
	return x.step(ctx, h, bpa.PhaseJoin, func(ctx context.Context, c install.Executor) error { return x.join(ctx, c, h, via) })
}

// initCluster makes the cluster on the first master, waits until it
// answers with its addons and bootstrap RBAC, stores its kubeconfig, and
// applies the plugins.
func (x *run) initCluster(ctx context.Context, c install.Executor, h *bpa.HostStatus) error {
	cl := x.cl
	if n := len(x.p.Spec.Masters); cl.VIP == "" && n >= vipMasters {
		x.r.event(ref(x.p), true, "NoControlPlaneVIP", "Init", fmt.Sprintf("making cluster %s of %d masters without a controlPlaneVIP: "+
			"its API endpoint is master %s's address, and the API stops answering when that host does", cl.Name, n, h.Name))
	}
	cl.Endpoint = hostOnly(h.Address)
	script, err := install.InitScript(x.cfg, cl, h.Name, hostOnly(h.Address))
	if err != nil {
		return err
	}
	if _, err := c.Run(ctx, install.Job{Name: bpa.PhaseInit, Script: script, Deadline: PhaseDeadlines[bpa.PhaseInit]}); err != nil {
		return err
	}
	if err := x.observe(ctx, h.Name, bpa.PhaseInit, func() ([]string, error) { return install.InitMissing(ctx, c) }); err != nil {
		return err
	}
	if err := x.storeKubeconfig(ctx, c); err != nil {
		return err
	}
	// The pod network, without which no node is Ready. The other KUD
	// plugins are a ContainerPackages' (syncKUDPackages), installed once
	// the cluster is.
	m, err := install.PluginManifest(x.cfg, cl, install.PluginFlannel)
	if err != nil {
		return err
	}
	return install.Apply(ctx, c, "the pod network ("+install.PluginFlannel+")", m)
}

// observe waits until missing reports nothing missing: the phase's
// observed state. It reads every ObservePoll until the phase's deadline
// (ctx's), and then fails with what was still missing.
func (x *run) observe(ctx context.Context, host, phase string, missing func() ([]string, error)) error {
	t := time.NewTicker(ObservePoll)
	defer t.Stop()
	for {
		m, err := missing()
		if err != nil {
			return err
		}
		if len(m) == 0 {
			return nil
		}
		ctrl.LoggerFrom(ctx).Info("waiting for the cluster", "host", host, "phase", phase, "missing", strings.Join(m, "; "))
		select {
		case <-t.C:
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return &install.DeadlineError{Host: host, Phase: phase, Deadline: PhaseDeadlines[phase], Detail: "still " + strings.Join(m, "; ")}
			}
			return ctx.Err()
		}
	}
}

// storeKubeconfig copies the admin kubeconfig into the cluster's Secret.
// The Secret is labelled with the cluster's name and owned by nothing:
// it is the only admin credential of a running cluster, so deleting the
// Provisioning must not take it along (an ownerReference a BPA before
// this one set is dropped).
func (x *run) storeKubeconfig(ctx context.Context, master install.Querier) error {
	kc, err := install.Kubeconfig(ctx, master)
	if err != nil {
		return err
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: KubeconfigSecretName(x.cl.Name), Namespace: x.p.Namespace}}
	op, err := controllerutil.CreateOrUpdate(ctx, x.r.Client, s, func() error {
		if s.Labels == nil {
			s.Labels = map[string]string{}
		}
		s.Labels[ClusterLabel] = x.cl.Name
		s.Type = corev1.SecretTypeOpaque
		s.Data = map[string][]byte{KubeconfigKey: kc}
		release(s, x.p)
		return nil
	})
	if err != nil {
		return fmt.Errorf("storing the kubeconfig in Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	x.mu.Lock()
	x.p.Status.KubeconfigSecret = s.Name
	x.mu.Unlock()
	if op != controllerutil.OperationResultNone {
		x.r.event(ref(x.p), false, ReasonKubeconfigStored, "StoreKubeconfig",
			fmt.Sprintf("the admin kubeconfig of cluster %s is in Secret %s/%s (key %s)", x.cl.Name, s.Namespace, s.Name, KubeconfigKey))
	}
	return nil
}

// join joins h through master via (the first master, or the contact
// while the first is away), and waits until the node is Ready and, for a
// master, its etcd member started and healthy.
func (x *run) join(ctx context.Context, c install.Executor, h, via *bpa.HostStatus) error {
	m, err := x.client(ctx, via)
	if err != nil {
		return fmt.Errorf("reaching master %s: %w", via.Name, err)
	}
	master := h.Role == RoleMaster
	j, err := install.JoinSecrets(ctx, m, master)
	if err != nil {
		return err
	}
	cl := x.cl
	cl.Endpoint = hostOnly(via.Address)
	script, err := install.JoinScript(cl, h.Name, hostOnly(h.Address), master, j)
	if err != nil {
		return err
	}
	if _, err := c.Run(ctx, install.Job{Name: bpa.PhaseJoin, Script: script, Secrets: []string{j.Token, j.CertificateKey},
		Deadline: PhaseDeadlines[bpa.PhaseJoin]}); err != nil {
		return err
	}
	return x.observe(ctx, h.Name, bpa.PhaseJoin, func() ([]string, error) { return install.JoinMissing(ctx, m, h.Name, master) })
}

// readyPhase marks each host in the cluster Ready once its node is,
// reading the nodes on master via. It stores the admin kubeconfig again
// when the Secret is gone (exists false) or the status names none: the
// cluster lives, and the Secret is its durable evidence.
func (x *run) readyPhase(ctx context.Context, via *bpa.HostStatus, exists bool) {
	var waiting []*bpa.HostStatus
	for i := range x.p.Status.Hosts {
		h := &x.p.Status.Hosts[i]
		if inCluster(h) && !phaseDone(h, bpa.PhaseReady) {
			if !phaseStarted(h, bpa.PhaseReady) {
				x.begin(ctx, h, bpa.PhaseReady)
			}
			waiting = append(waiting, h)
		}
	}
	if len(waiting) == 0 && exists && x.p.Status.KubeconfigSecret != "" {
		return
	}
	m, err := x.client(ctx, via)
	var ready map[string]bool
	if err == nil && len(waiting) > 0 {
		ready, err = install.NodesReady(ctx, m)
	}
	if err != nil {
		x.fail(ctx, via, bpa.PhaseReady, err)
		return
	}
	for _, h := range waiting {
		if ready[h.Name] {
			x.end(ctx, h, bpa.PhaseReady)
			t := metav1.NewTime(x.now().Truncate(time.Second))
			h.State, h.LastUpdated = bpa.HostReady, &t
		} else {
			x.wantAgain(ReadyPoll)
		}
	}
	if !exists || x.p.Status.KubeconfigSecret == "" {
		if err := x.storeKubeconfig(ctx, m); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "storing the kubeconfig")
		}
	}
}

// bootAddress is the address inspection saw on the boot NIC: for hosts
// the site gives no static address (their OS takes one by DHCP on the
// same NIC).
func bootAddress(b *metal3.BareMetalHost, mac string) string {
	if b == nil || b.Status.HardwareDetails == nil {
		return ""
	}
	for _, n := range b.Status.HardwareDetails.NIC {
		if NormalizeMAC(n.MAC) == mac && n.IP != "" {
			return n.IP
		}
	}
	return ""
}

// hostOnly drops a port from an address.
func hostOnly(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}
