package controller

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	metal3 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bootstick/bootstick/internal/bpa/install"
	bpa "github.com/bootstick/bootstick/internal/bpa/v1alpha1"
	"github.com/bootstick/bootstick/internal/sshkeys"
	"github.com/bootstick/bootstick/internal/sshtest"
)

// TestInstallerRefusesAndRetries runs the BPA against a real
// kube-apiserver and an SSH server of the test's that answers every
// script with a failure (it runs nothing). A provisioned master that
// cannot be reached is Unreachable with the reason and retried with
// backoff; a host showing another host key is refused before anything
// runs on it; a failing install shows its error with the secrets masked;
// and a KUD plugin the stick lacks stops the install with a clear status.
// Each is an Event too, with no secret in it.
func TestInstallerRefusesAndRetries(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver from the toolchain")
	}
	BackoffBase, BackoffMax = 200*time.Millisecond, time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env, c := apiServer(t, ctx)
	const ns = "metal3"
	key, err := sshkeys.Generate(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: SSHKeySecret, Namespace: ns}, Type: corev1.SecretTypeSSHAuth,
		Data: map[string][]byte{corev1.SSHAuthPrivateKey: key.Private}}); err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.ParsePrivateKey(key.Private)
	if err != nil {
		t.Fatal(err)
	}
	const token = "abcdef.0123456789abcdef"
	srv := sshtest.Start(t, signer.PublicKey(), func(cmd, stdin string) (string, string, uint32) {
		return "", "E: dpkg was interrupted, run 'dpkg --configure -a'; token " + token, 1
	})
	other := sshtest.Start(t, signer.PublicKey(), nil) // the wrong machine

	// A port nothing listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()

	cfg := installConfig(nil)
	hostKey := string(ssh.MarshalAuthorizedKey(srv.HostKey))
	setConfig := func(addr string) {
		t.Helper()
		cfg.Hosts = map[string]install.Host{"master-0": {Address: addr, HostKey: hostKey}}
		data, err := cfg.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: install.ConfigMapName, Namespace: ns}}
		if err := c.Get(ctx, client.ObjectKeyFromObject(cm), cm); err != nil {
			cm.Data = map[string]string{install.ConfigKey: data}
			if err := c.Create(ctx, cm); err != nil {
				t.Fatal(err)
			}
			return
		}
		cm.Data = map[string]string{install.ConfigKey: data}
		if err := c.Update(ctx, cm); err != nil {
			t.Fatal(err)
		}
	}
	setConfig(closed)

	b := &metal3.BareMetalHost{ObjectMeta: metav1.ObjectMeta{Name: "bmh-a", Namespace: ns}}
	b.Spec.BootMACAddress, b.Spec.Online = "52:54:00:00:00:10", true
	if err := c.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	b.Status.OperationalStatus = metal3.OperationalStatusOK
	b.Status.Provisioning.State = metal3.StateProvisioned
	b.Status.OperationHistory.Provision.End = metav1.NewTime(time.Now().Add(-time.Minute))
	if err := c.Status().Update(ctx, b); err != nil {
		t.Fatal(err)
	}
	p := &bpa.Provisioning{ObjectMeta: metav1.ObjectMeta{Name: "edge", Namespace: ns}}
	p.Spec.Masters = []map[string]bpa.Master{{"master-0": {MACaddress: "52:54:00:00:00:10"}}}
	if err := c.Create(ctx, p); err != nil {
		t.Fatal(err)
	}

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- Run(runCtx, env.Config, Options{SkipNameValidation: true}) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	// wait polls the Provisioning until ok holds.
	wait := func(what string, ok func(p *bpa.Provisioning, h bpa.HostStatus) bool) bpa.HostStatus {
		t.Helper()
		var last bpa.HostStatus
		for ctx.Err() == nil {
			var p bpa.Provisioning
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "edge"}, &p); err != nil {
				t.Fatal(err)
			}
			if len(p.Status.Hosts) == 1 {
				last = p.Status.Hosts[0]
				if ok(&p, last) {
					data, _ := json.Marshal(p.Status)
					for _, secret := range []string{string(key.Private), token, "PRIVATE KEY"} {
						if strings.Contains(string(data), secret) {
							t.Fatalf("%s: the status holds a secret: %s", what, data)
						}
					}
					return last
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("%s: never; last host status %+v", what, last)
		return last
	}

	h := wait("unreachable", func(_ *bpa.Provisioning, h bpa.HostStatus) bool {
		return h.State == bpa.HostUnreachable && h.Failures >= 2
	})
	if !strings.Contains(h.Error, "connection refused") || !strings.Contains(h.Error, "connect: cannot reach "+closed) || h.NextRetry == nil {
		t.Errorf("an unreachable host's status: %+v", h)
	}
	t.Logf("unreachable: %s", h.Error)

	// The wrong machine answers: refused before anything runs.
	setConfig(other.Addr)
	h = wait("wrong host key", func(_ *bpa.Provisioning, h bpa.HostStatus) bool {
		return h.State == bpa.HostError && strings.Contains(h.Error, "refused")
	})
	if want := ssh.FingerprintSHA256(srv.HostKey); !strings.Contains(h.Error, want) || !strings.Contains(h.Error, ssh.FingerprintSHA256(other.HostKey)) {
		t.Errorf("the refusal names neither key: %s", h.Error)
	}
	if n := len(other.Commands()); n != 0 {
		t.Errorf("%d scripts ran on a host with the wrong key", n)
	}
	t.Logf("wrong host key: %s", h.Error)

	// The right machine: connected; its install fails, the token masked.
	setConfig(srv.Addr)
	h = wait("install fails", func(_ *bpa.Provisioning, h bpa.HostStatus) bool {
		// The test's server answers the job's start with the failure.
		return h.State == bpa.HostError && strings.Contains(h.Error, "install: starting the install job on master-0")
	})
	if !phaseDone(&h, bpa.PhaseConnect) || phaseDone(&h, bpa.PhaseInstall) || !strings.Contains(h.Error, "dpkg was interrupted") || !strings.Contains(h.Error, "[redacted]") {
		t.Errorf("a failed install's status: %+v", h)
	}
	if cmds := srv.Commands(); len(cmds) == 0 || !strings.Contains(cmds[0], "dpkg --configure -a") {
		t.Errorf("the install script did not reach the host")
	}
	t.Logf("failed install: %s", h.Error)
	// Each failed try closes its connection: after two more, the host
	// holds none but the current try's.
	failures := h.Failures
	wait("two more failed installs", func(_ *bpa.Provisioning, h bpa.HostStatus) bool { return h.Failures >= failures+2 })
	for srv.Open() > 1 && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
	if n := srv.Open(); n > 1 {
		t.Errorf("the host holds %d of the BPA's connections after two more failed installs: failed tries leak them", n)
	}

	// A plugin the stick lacks stops everything, with a reason.
	// The BPA writes the status meanwhile: read again on a conflict.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var cur bpa.Provisioning
		if err := c.Get(ctx, client.ObjectKeyFromObject(p), &cur); err != nil {
			return err
		}
		cur.Spec.KUDPlugins = []string{"multus"}
		return c.Update(ctx, &cur)
	}); err != nil {
		t.Fatal(err)
	}
	wait("unknown plugin", func(p *bpa.Provisioning, _ bpa.HostStatus) bool {
		cond := meta.FindStatusCondition(p.Status.Conditions, ConditionClusterReady)
		return cond != nil && cond.Reason == "UnknownPlugin" &&
			strings.Contains(cond.Message, "KUD plugins multus are not on this stick, which serves flannel")
	})
	// Each phase's start, end and failure, and the refusal, are Events on the
	// Provisioning, and none holds the key or the token.
	for reasons := map[string]bool{}; !(reasons[ReasonPhaseStarted] && reasons[ReasonPhaseFinished] && reasons[ReasonHostUnreachable] && reasons[ReasonPhaseFailed] && reasons["UnknownPlugin"]); {
		if ctx.Err() != nil {
			t.Fatalf("events: %v", reasons)
		}
		time.Sleep(50 * time.Millisecond)
		reasons = eventReasons(ctx, t, c, ns, key.Private, []byte(token))
	}
}
