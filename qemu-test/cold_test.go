package qemutest

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bootstick/bootstick/internal/command"

	"github.com/bootstick/bootstick/internal/qemu"
	"github.com/bootstick/bootstick/internal/testctx"
)

// ColdMode is the boot mode of scenario 1 in `make test`: what a user
// who dd's the stick gets, under the firmware most servers still boot.
var ColdMode = Mode{qemu.BIOS, qemu.USB}

// Budgets under TCG (the guest runs 5-10 times slower than native).
const (
	bootBudget      = 10 * time.Minute // power-on to firstboot.service
	firstbootBudget = 45 * time.Minute // firstboot.service to done
	sshBudget       = 5 * time.Minute
)

var shared string // outlives the tests: the stick

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "bootstick-qemu-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	shared = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// stickFor builds the shared stick (or takes BOOTSTICK_ISO).
func stickFor(t *testing.T, ctx context.Context) *Stick {
	t.Helper()
	var log strings.Builder
	s, err := SharedStick(ctx, filepath.Join(shared, "stick"), &log)
	if err != nil {
		t.Fatalf("building the stick: %v\n%s", err, command.Tail(log.String(), 40))
	}
	if s.BuildTime > 0 {
		t.Logf("stick: %s (mkusb build --site: %.1fs)", s.ISO, s.BuildTime.Seconds())
	}
	return s
}

// afterCold runs more scenarios on scenario 1's machine (the e2e reboot).
var afterCold func(t *testing.T, ctx context.Context, s *Stick, run *Run, m *Machine, snap Snapshot)

// TestColdBoot is scenario 1: power on with an empty data disk and no
// route out (the site names no gateway); firstboot finishes, the node is
// Ready on the provisioning address, every pod is Running from images the
// stick's registry served, and the site's objects exist. make test runs it
// until the appliance's own Kubernetes is up (ownCluster); make e2e to done,
// then on to the reboot.
func TestColdBoot(t *testing.T) {
	if testing.Short() {
		t.Skip("boots the real stick in QEMU under TCG through a whole first boot (tens of minutes): integration tier")
	}
	// The e2e reboot adds its own budget; testctx keeps the whole inside
	// the test binary's -timeout, with time left to print the diagnosis.
	budget := 75 * time.Minute
	if afterCold != nil {
		budget += firstbootBudget
	}
	ctx, cancel := testctx.New(t, budget)
	defer cancel()
	s := stickFor(t, ctx)
	run := NewRun(t, "cold")
	m := run.Boot(ctx, s, ColdMode, "boot1")

	if _, err := m.WaitConsole(ctx, firstbootStarting, bootBudget); err != nil {
		run.Fatalf("scenario 1 (%s): %v", ColdMode, err)
	}
	if afterCold == nil {
		ownCluster(t, ctx, run, m)
		if !t.Failed() {
			sealedScenarios(t, ctx, s, run, m)
		}
		return
	}
	done, err := m.WaitFirstboot(ctx, firstbootBudget)
	if err != nil {
		run.Fatalf("scenario 1 (%s): %v", ColdMode, err)
	}
	if _, err := m.Connect(ctx, sshBudget); err != nil {
		run.Fatalf("scenario 1 (%s): firstboot finished but: %v", ColdMode, err)
	}
	run.Report(ctx, m, fmt.Sprintf("scenario 1, cold boot to done (%s)", ColdMode), done)

	rep, err := m.Status(ctx)
	if err != nil {
		run.Fatalf("firstboot status: %v", err)
	}
	if rep.Phase != "done" {
		run.Errorf("firstboot status: phase %q, want done", rep.Phase)
	}
	snap, errs := m.CheckCluster(ctx, s.Site)
	for _, err := range errs {
		run.Errorf("%v", err)
	}
	checkAppliance(t, ctx, run, m)
	if t.Failed() || afterCold == nil {
		return
	}
	afterCold(t, ctx, s, run, m, snap)
}

// clusterUp is firstboot's console line at the end of its cni step: the
// appliance's own Kubernetes is up (kubeadm init, the node's pod
// network), and the manifests step starts.
var clusterUp = regexp.MustCompile(`step cni \(\d+/\d+\): done in`)

// ownCluster is scenario 1 as make test runs it: the stick cold boots
// until the appliance's own Kubernetes is up (firstboot's cni step done:
// the node Ready, its control plane, CoreDNS and kube-proxy Running),
// under systemd on the live OS, from its own registry, with no route out.
// The steps after it run in host mode in make test
// (TestProvisionDHCPClock: the manifests step's BPA, the metal3 and site
// steps), at the host's speed, and on this guest in make e2e (TestColdBoot
// with the reboot scenarios, to done).
//
// Under TCG on this machine the manifests step took 108 s (session 31),
// 270 s (32), 532 s (33) and over 15 minutes (34): the metal3 CRDs, the
// BPA's and CoreDNS's pods starting beside the control plane, while the
// API server stopped answering for minutes, until the kubelet killed it
// on its liveness probe (34). On a real machine that step is seconds; in
// make test here it was the tier's whole spread, and CI's.
//
// There make test holds the appliance: it stops firstboot.service (as an
// operator may; firstboot resumes at its next start) as soon as the cni
// step is done, before the manifests step applies anything.
func ownCluster(t *testing.T, ctx context.Context, run *Run, m *Machine) {
	t.Helper()
	// The connection is made first, so that the stop is one command.
	if _, err := m.Connect(ctx, bootBudget); err != nil {
		run.Fatalf("scenario 1 (%s): firstboot started but: %v", ColdMode, err)
	}
	up, err := m.WaitConsole(ctx, clusterUp, firstbootBudget)
	if err != nil {
		run.Fatalf("scenario 1 (%s), until the appliance's own Kubernetes is up: %v", ColdMode, err)
	}
	if out, err := m.Run(ctx, "systemctl stop firstboot.service"); err != nil {
		run.Fatalf("scenario 1 (%s): stopping firstboot after its cni step: %v\n%s", ColdMode, err, out)
	}
	t.Logf("stopped firstboot.service after its cni step, %s from power-on", m.Since().Round(time.Second))
	run.ReportUntil(ctx, m, fmt.Sprintf("scenario 1, cold boot to the appliance's own Kubernetes (%s)", ColdMode), "the cni step done", up)
	rep, err := m.Status(ctx)
	if err != nil {
		run.Fatalf("firstboot status: %v", err)
	}
	for _, st := range rep.Steps {
		if st.Name == "manifests" {
			break
		}
		if st.State != "done" {
			run.Errorf("firstboot status: step %s is %s, want done (the cni step is)", st.Name, st.State)
		}
	}
	// CoreDNS starts once the node has its pod network: it may still be
	// starting when the cni step ends.
	for _, err := range m.CheckOwnCluster(ctx, 10*time.Minute) {
		run.Errorf("%v", err)
	}
	checkAppliance(t, ctx, run, m)
}

// checkAppliance checks what scenario 1 proves of the machine itself,
// whether firstboot is done or not.
func checkAppliance(t *testing.T, ctx context.Context, run *Run, m *Machine) {
	t.Helper()
	// Under systemd, firstboot runs its services as transient units
	// through systemd's D-Bus API.
	for _, err := range m.CheckTransientUnits(ctx) {
		run.Errorf("%v", err)
	}
	for _, err := range m.CheckHostKey(ctx) {
		run.Errorf("%v", err)
	}
	for _, err := range m.CheckKernel(ctx) {
		run.Errorf("%v", err)
	}
	for _, err := range m.CheckFirewall(ctx) {
		run.Errorf("%v", err)
	}
	// The test site names no gateway (slirp's network, restrict=on, has no
	// router): the appliance comes up on its provisioning address.
	t.Run("NoRouter", func(t *testing.T) {
		for _, err := range m.CheckNoRouter(ctx, "172.22.0.1") {
			t.Errorf("%v", err)
		}
	})
}

// Run is one scenario's folder, data disk, TPM and host key pin. It keeps the
// serial logs and prints the diagnosis when the test fails, and appends
// each boot's time table to the times file.
type Run struct {
	t        *testing.T
	Name     string
	Dir      string
	DataDisk string
	// TPM is the machine's TPM 2.0 (its swtpm state folder), the same in
	// every boot of the run unless a boot names another; empty is none.
	TPM string
	// Stick, when set, keeps what the machines write to their USB stick
	// from one boot to the next (a qcow2 overlay); else each boot's
	// writes are lost.
	Stick string
	Keys  *HostKeys
	logs  string
	// life keeps the machines on until cleanup has diagnosed them (the
	// test's own context ends first).
	life     context.Context
	stop     context.CancelFunc
	mu       sync.Mutex
	machines []*Machine
	// failures are what failed the scenario (Errorf, Fatalf): cleanup
	// says them again after the long diagnosis, where a reader of the
	// output's end sees them.
	failures []string
}

// Errorf fails the scenario with the message, which cleanup repeats last.
func (r *Run) Errorf(format string, args ...any) {
	r.t.Helper()
	msg := fmt.Sprintf(format, args...)
	r.mu.Lock()
	r.failures = append(r.failures, msg)
	r.mu.Unlock()
	r.t.Error(msg)
}

// Fatalf is Errorf, and ends the test.
func (r *Run) Fatalf(format string, args ...any) {
	r.t.Helper()
	r.Errorf(format, args...)
	r.t.FailNow()
}

// NewRun prepares a scenario with an empty data disk.
func NewRun(t *testing.T, name string) *Run {
	dir := filepath.Join(shared, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	life, stop := context.WithCancel(context.Background())
	r := &Run{t: t, Name: name, Dir: dir, DataDisk: filepath.Join(dir, "data.img"), TPM: filepath.Join(dir, "tpm"), Keys: &HostKeys{}, logs: logsDir(), life: life, stop: stop}
	t.Cleanup(r.cleanup)
	return r
}

// logsDir is where serial logs of failed runs and the times file go:
// $BOOTSTICK_E2E_LOGS, else out/qemu-test in the checkout.
func logsDir() string {
	if d := os.Getenv(EnvLogs); d != "" {
		return d
	}
	if repo, err := RepoRoot(); err == nil {
		return filepath.Join(repo, "out", "qemu-test")
	}
	return filepath.Join(os.TempDir(), "bootstick-qemu-test-logs")
}

// Boot powers on a machine on the run's data disk.
func (r *Run) Boot(ctx context.Context, s *Stick, mode Mode, name string) *Machine {
	r.t.Helper()
	return r.BootWith(ctx, s, BootOptions{Mode: mode}, name)
}

// BootWith powers on a machine on the run's data disk, with o's mode and
// provisioning tap.
func (r *Run) BootWith(ctx context.Context, s *Stick, o BootOptions, name string) *Machine {
	r.t.Helper()
	mode := o.Mode
	o.Dir, o.DataDisk, o.HostKeys = filepath.Join(r.Dir, name), r.DataDisk, r.Keys
	if o.TPMState == "" {
		o.TPMState = r.TPM
	}
	if o.StickOverlay == "" {
		o.StickOverlay = r.Stick
	}
	m, err := Boot(r.life, s, o)
	if err != nil {
		r.t.Fatalf("%s: %v", mode, err)
	}
	r.t.Logf("%s %s: powered on (accel %s %s); ssh -i %s -p %d root@127.0.0.1", r.Name, name, m.VM.Accel.Name, m.VM.Accel.Why, s.KeyFile, m.SSHPort())
	r.mu.Lock()
	r.machines = append(r.machines, m)
	r.mu.Unlock()
	return m
}

func (r *Run) cleanup() {
	r.judgePanics()
	r.mu.Lock()
	defer r.mu.Unlock()
	// The last machine's console tail is said again with the failures:
	// CI keeps only the output's ends, and the serial log kept under
	// out/ goes with CI's clone.
	var tail string
	for i, m := range r.machines {
		last := i == len(r.machines)-1
		if r.t.Failed() {
			if last {
				r.t.Log(m.Diagnose(context.Background()))
				tail = fmt.Sprintf("%s's console, last lines (%s from power-on):\n%s", m.Mode, m.Since().Round(time.Second), m.Console.Tail(12))
				r.timeTable(m, fmt.Sprintf("%s (%s), failed", r.t.Name(), m.Mode))
			}
			if err := keepLog(m.VM.SerialLog, filepath.Join(r.logs, fmt.Sprintf("%s-%s-boot%d-serial.log", strings.ReplaceAll(r.t.Name(), "/", "_"), m.Mode, i+1))); err != nil {
				r.t.Logf("keeping the serial log: %v", err)
			} else {
				r.t.Logf("serial log kept in %s", r.logs)
			}
		}
		m.PowerCut()
	}
	r.stop()
	os.RemoveAll(r.Dir)
	if len(r.failures) > 0 {
		r.t.Logf("%s\n%s failed (the diagnosis is above):\n  %s", tail, r.t.Name(), strings.Join(r.failures, "\n  "))
	}
}

// judgePanics fails the scenario for each kernel panic its machines had,
// but TCG's race on the kernel's patching of its own code (Panic.TCGRace),
// which it notes in the log and the times file: the machine rebooted
// itself 10 s later, as a server does, and the scenario carried on.
func (r *Run) judgePanics() {
	r.mu.Lock()
	machines := append([]*Machine(nil), r.machines...)
	r.mu.Unlock()
	for i, m := range machines {
		for _, p := range m.Panics() {
			what := fmt.Sprintf("%s boot %d (%s): the guest's kernel panicked %s", r.Name, i+1, m.Mode, p)
			if !p.TCGRace {
				r.Errorf("%s", what)
				continue
			}
			msg := what + "; an int3 the kernel had already patched away: QEMU's multi-threaded TCG ran a stale translation of its own code (not a fault of the appliance), and the machine rebooted itself (panic=10)"
			r.record(msg)
		}
	}
}

func keepLog(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// Report logs and records one boot's time table, from its console and
// its state file.
func (r *Run) Report(ctx context.Context, m *Machine, title string, done Line) {
	r.ReportUntil(ctx, m, title, "firstboot finished", done)
}

// ReportUntil records the boot's time table, ending with what happened
// at line end.
func (r *Run) ReportUntil(ctx context.Context, m *Machine, title, what string, end Line) {
	tl, err := m.Timeline(ctx, title)
	if err != nil {
		r.t.Logf("time table: %v", err)
	}
	r.record(fmt.Sprintf("%s\n  %s %.1fs after power-on\n", tl, what, end.At.Seconds()))
}

// timeTable records what a failed boot got through, when its state file
// can still be read.
func (r *Run) timeTable(m *Machine, title string) {
	select {
	case <-m.VM.Done():
		r.record(BuildTimeline(title, m.Console.Lines(), nil, 0, m.PowerOn).String())
		return
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tl, err := m.Timeline(ctx, title)
	if err != nil {
		r.t.Logf("time table: %v", err)
	}
	r.record(tl.String())
}

func (r *Run) record(text string) {
	r.t.Log("\n" + text)
	if err := os.MkdirAll(r.logs, 0o755); err == nil {
		f, err := os.OpenFile(filepath.Join(r.logs, "times.txt"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			fmt.Fprintf(f, "# %s %s\n%s\n", time.Now().UTC().Format(time.RFC3339), r.t.Name(), text)
			f.Close()
		}
	}
}

// stepRan matches a step that ran (not one found already done).
func stepRan(step string) *regexp.Regexp {
	return regexp.MustCompile(`step ` + regexp.QuoteMeta(step) + ` \(\d+/\d+\): done in`)
}
