//go:build e2e

package qemutest

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/bootstick/bootstick/internal/status"
	"github.com/bootstick/bootstick/internal/testctx"
)

// The steps that change the cluster: a reboot must find each done and run
// none of them again. (The registry, containerd and kubelet live in the
// live system's RAM, so their steps may start them again.)
var clusterSteps = []string{"kubeadm-init", "untaint", "cni", "manifests", "site"}

func init() { afterCold = rebootScenario }

// settleBudget is how long the pods may take to come back after a boot
// on which firstboot had nothing left to do (TCG).
const settleBudget = 10 * time.Minute

// rebootScenario is scenario 2, on scenario 1's machine: a clean power-off
// and a power-on with the same data disk. The cluster is kept (the same
// objects, by UID), and firstboot repeats none of the steps that build it.
func rebootScenario(t *testing.T, ctx context.Context, s *Stick, run *Run, m1 *Machine, before Snapshot) {
	if err := m1.PowerOff(3 * time.Minute); err != nil {
		t.Logf("power-off: %v", err)
	}
	m := run.Boot(ctx, s, ColdMode, "boot2")
	done, err := m.WaitFirstboot(ctx, firstbootBudget)
	if err != nil {
		t.Fatalf("scenario 2 (reboot): %v", err)
	}
	run.Report(ctx, m, fmt.Sprintf("scenario 2, reboot (%s)", ColdMode), done)
	for _, step := range clusterSteps {
		if l, ok := m.Console.First(stepRan(step)); ok {
			t.Errorf("scenario 2: the reboot ran step %s again: %s", step, l.Text)
		}
	}
	after, errs, took := m.CheckSettled(ctx, s.Site, settleBudget)
	t.Logf("scenario 2: every pod ready %.0fs after firstboot finished", took.Seconds())
	for _, err := range append(errs, CompareSnapshots(before, after)...) {
		t.Errorf("scenario 2: %v", err)
	}
	for _, err := range m.CheckHostKey(ctx) {
		t.Errorf("scenario 2: %v", err)
	}
}

// TestPowerCutDuringKubeadmInit is scenario 3: the plug is pulled while
// kubeadm init runs (its state is "running" and the static pod manifests
// are written). The next power-on resumes kubeadm-init and finishes.
// cutMoments are the moments of kubeadm init the power is cut at, each a
// shell test run in the guest while the kubeadm-init step is running (in
// its order: certificates, kubeconfigs, etcd's and the API server's static
// pods, waiting for the API server alone, then the rest of kubeadm init:
// the other static pods, upload-config, bootstrap token and addons):
// during the certificates (the CA written, no kubeconfig yet), once the
// static pods are written and the API server does not answer yet, and
// once it answers (while the step waits for it or kubeadm's last phases
// run).
var cutMoments = []struct{ name, test string }{
	{"certificates", "test -e /etc/kubernetes/pki/ca.crt && ! test -e /etc/kubernetes/admin.conf"},
	{"static-pods", "test -e /etc/kubernetes/manifests/kube-apiserver.yaml && ! curl -sk --max-time 2 https://127.0.0.1:6443/readyz | grep -qx ok"},
	{"api-answers", "test -e /etc/kubernetes/admin.conf && curl -sk --max-time 2 https://127.0.0.1:6443/readyz | grep -qx ok"},
}

// TestPowerCutDuringKubeadmInit is scenario 3, once per moment: the power
// is cut while kubeadm init runs, and the next boot finishes the first
// boot with every pod ready.
func TestPowerCutDuringKubeadmInit(t *testing.T) {
	for _, moment := range cutMoments {
		t.Run(moment.name, func(t *testing.T) { powerCutAt(t, moment.name, moment.test) })
	}
}

func powerCutAt(t *testing.T, moment, test string) {
	ctx, cancel := testctx.New(t, 110*time.Minute)
	defer cancel()
	s := stickFor(t, ctx)
	run := NewRun(t, "powercut-"+moment)
	m1 := run.Boot(ctx, s, ColdMode, "boot1")

	started := regexp.MustCompile(`step containerd \(\d+/\d+\): (done in|already)`)
	if _, err := m1.WaitConsole(ctx, started, bootBudget+firstbootBudget/2); err != nil {
		t.Fatalf("scenario 3 (%s): waiting for kubeadm-init to start: %v", moment, err)
	}
	if _, err := m1.Connect(ctx, sshBudget); err != nil {
		t.Fatalf("scenario 3 (%s): %v", moment, err)
	}
	// Cut at the moment, while the step is still running.
	deadline := time.Now().Add(15 * time.Minute)
	for {
		out, _ := m1.Run(ctx, test+" && echo now")
		rep, err := m1.Status(ctx)
		if err == nil {
			state := stepState(rep.Steps, "kubeadm-init")
			if state == "done" {
				t.Fatalf("scenario 3 (%s): kubeadm-init finished before the harness could cut the power", moment)
			}
			if out == "now\n" && state == "running" {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("scenario 3 (%s): kubeadm init did not reach the moment in 15 minutes", moment)
		}
		time.Sleep(time.Second) // polling a guest over SSH: nothing to wait on
	}
	cutAt := m1.Since()
	m1.PowerCut()
	t.Logf("scenario 3 (%s): power cut %.1fs after power-on, during kubeadm init", moment, cutAt.Seconds())

	m2 := run.Boot(ctx, s, ColdMode, "boot2")
	done, err := m2.WaitFirstboot(ctx, bootBudget+firstbootBudget)
	if err != nil {
		t.Fatalf("scenario 3 (%s, after the power cut): %v", moment, err)
	}
	run.Report(ctx, m2, fmt.Sprintf("scenario 3, the boot after a power cut during kubeadm init (%s, %s)", moment, ColdMode), done)
	if _, ok := m2.Console.First(regexp.MustCompile(`step kubeadm-init \(\d+/\d+\): interrupted in an earlier run`)); !ok {
		t.Errorf("scenario 3 (%s): firstboot did not report kubeadm-init as interrupted by the power cut", moment)
	}
	_, errs, took := m2.CheckSettled(ctx, s.Site, settleBudget)
	t.Logf("scenario 3 (%s): every pod ready %.0fs after firstboot finished", moment, took.Seconds())
	for _, err := range errs {
		t.Errorf("scenario 3 (%s): %v", moment, err)
	}
}

func stepState(steps []status.StepReport, name string) string {
	for _, s := range steps {
		if s.Name == name {
			return s.State
		}
	}
	return ""
}

// TestBootModes is scenario 4: the stick boots as a CD and as a USB disk,
// under BIOS and UEFI, to firstboot.service, and answers SSH on the
// restricted network. (Scenario 1 takes ColdMode all the way.)
func TestBootModes(t *testing.T) {
	ctx, cancel := testctx.New(t, 60*time.Minute)
	defer cancel()
	s := stickFor(t, ctx)
	for _, mode := range Modes {
		t.Run(mode.String(), func(t *testing.T) {
			run := NewRun(t, "mode-"+mode.String())
			m := run.Boot(ctx, s, mode, "boot1")
			l, err := m.WaitConsole(ctx, firstbootStarting, bootBudget)
			if err != nil {
				t.Fatalf("scenario 4 (%s): %v", mode, err)
			}
			if _, err := m.Connect(ctx, sshBudget); err != nil {
				t.Fatalf("scenario 4 (%s): %v", mode, err)
			}
			t.Logf("scenario 4 (%s): firstboot.service started %.1fs after power-on, SSH answered at %.1fs", mode, l.At.Seconds(), m.Since().Seconds())
		})
	}
}
