package supervise

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bootstick/bootstick/internal/logctx"
)

// The test binary doubles as the supervisor.
func TestMain(m *testing.M) {
	if os.Getenv("SUPERVISE_TEST_HELPER") == "1" {
		fs := flag.NewFlagSet("supervise", flag.ExitOnError)
		dir := fs.String("dir", "", "")
		name := fs.String("name", "", "")
		fs.Parse(os.Args[2:]) // after -test.run=^$
		if err := RunSupervisor(logctx.With(context.Background(), slog.New(slog.NewTextHandler(os.Stderr, nil))), *dir, *name, fs.Args()); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func testManager(t *testing.T) *Process {
	return &Process{Dir: t.TempDir(), SupervisorCommand: []string{os.Args[0], "-test.run=^$"}, Env: []string{"SUPERVISE_TEST_HELPER=1"}}
}

func waitFor(t *testing.T, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestProcessLifecycle(t *testing.T) {
	m := testManager(t)
	ctx := context.Background()
	svc := Service{Name: "sleeper", Command: []string{"/bin/sleep", "1000"}}
	t.Cleanup(func() { m.Stop(ctx, "sleeper") })

	if err := m.Start(ctx, svc); err != nil {
		t.Fatal(err)
	}
	sup := supervisorPID(m.pidFile("sleeper"), "sleeper")
	waitFor(t, "the service", func() bool { return m.ChildPID("sleeper") > 0 })
	child := m.ChildPID("sleeper")
	if !strings.HasPrefix(cmdlineOf(child), "/bin/sleep 1000") {
		t.Fatalf("child %d runs %q", child, cmdlineOf(child))
	}

	// Starting again is a no-op.
	if err := m.Start(ctx, svc); err != nil {
		t.Fatal(err)
	}
	if got := supervisorPID(m.pidFile("sleeper"), "sleeper"); got != sup {
		t.Errorf("second Start replaced the supervisor: %d → %d", sup, got)
	}

	// A crashed service comes back.
	syscall.Kill(child, syscall.SIGKILL)
	waitFor(t, "the restart", func() bool { c := m.ChildPID("sleeper"); return c > 0 && c != child })

	// Stop leaves nothing running.
	child = m.ChildPID("sleeper")
	if err := m.Stop(ctx, "sleeper"); err != nil {
		t.Fatal(err)
	}
	if alive(sup) || alive(child) {
		t.Errorf("after Stop: supervisor alive %v, service alive %v", alive(sup), alive(child))
	}
	if active, _ := m.Active(ctx, "sleeper"); active {
		t.Error("still active after Stop")
	}
	if err := m.Stop(ctx, "sleeper"); err != nil {
		t.Errorf("stopping a stopped service: %v", err)
	}
	if log, _ := os.ReadFile(m.LogFile("sleeper")); !strings.Contains(string(log), "service started") {
		t.Errorf("the log file lacks the supervisor's lines: %s", log)
	}
}

func TestKilledSupervisorTakesTheServiceWithIt(t *testing.T) {
	m := testManager(t)
	ctx := context.Background()
	if err := m.Start(ctx, Service{Name: "orphan", Command: []string{"/bin/sleep", "1000"}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Stop(ctx, "orphan") })
	waitFor(t, "the service", func() bool { return m.ChildPID("orphan") > 0 })
	child := m.ChildPID("orphan")
	syscall.Kill(supervisorPID(m.pidFile("orphan"), "orphan"), syscall.SIGKILL)
	waitFor(t, "the service to die with its supervisor", func() bool { return !alive(child) })
}

// TestStopSparesARecycledPid: with no supervisor left, Stop kills the
// process its child file names only if that process is the service (the
// pid and its start time agree): a process that was given the pid
// afterwards lives on, and one whose child file has no start time too.
func TestStopSparesARecycledPid(t *testing.T) {
	m := testManager(t)
	ctx := context.Background()
	stranger := exec.Command("/bin/sleep", "1000")
	if err := stranger.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { stranger.Wait(); close(exited) }()
	t.Cleanup(func() { stranger.Process.Kill(); <-exited })
	pid := stranger.Process.Pid
	start, ok := startTime(pid)
	if !ok {
		t.Fatalf("no start time for pid %d", pid)
	}
	for _, record := range []string{fmt.Sprintf("%d %d\n", pid, start+1), fmt.Sprintf("%d\n", pid)} {
		if err := os.WriteFile(m.childFile("gone"), []byte(record), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := m.Stop(ctx, "gone"); err != nil {
			t.Fatal(err)
		}
		if killed(pid, exited) {
			t.Fatalf("Stop killed pid %d, which the child file %q names but is not the service", pid, record)
		}
	}
	if err := writeChild(m.childFile("gone"), pid); err != nil {
		t.Fatal(err)
	}
	if err := m.Stop(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(15 * time.Second):
		t.Fatalf("Stop left the orphaned service (pid %d) running", pid)
	}
}

// killed says whether pid has been sent SIGKILL: once kill(2) returns,
// the signal is pending on its threads (SigPnd), or it is a zombie, or
// its parent (this test, through exited) has reaped it.
func killed(pid int, exited <-chan struct{}) bool {
	select {
	case <-exited:
		return true
	default:
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return true
	}
	for _, l := range strings.Split(string(data), "\n") {
		k, v, _ := strings.Cut(l, ":")
		v = strings.TrimSpace(v)
		switch k {
		case "State":
			if strings.HasPrefix(v, "Z") {
				return true
			}
		case "SigPnd", "ShdPnd":
			if mask, err := strconv.ParseUint(v, 16, 64); err == nil && mask&(1<<(uint(syscall.SIGKILL)-1)) != 0 {
				return true
			}
		}
	}
	return false
}

func TestServiceValidation(t *testing.T) {
	m := testManager(t)
	for _, s := range []Service{
		{Name: "", Command: []string{"/bin/true"}},
		{Name: "a/b", Command: []string{"/bin/true"}},
		{Name: "ok", Command: []string{"true"}},
		{Name: "ok"},
	} {
		if err := m.Start(context.Background(), s); err == nil {
			t.Errorf("Start(%+v) succeeded", s)
		}
	}
}

// TestOneSupervisorPerService starts two supervisors for one service at
// once, as a killed run and its successor can: one is left, and Stop leaves
// no process of the service behind.
func TestOneSupervisorPerService(t *testing.T) {
	m := testManager(t)
	ctx := context.Background()
	var cmds []*exec.Cmd
	for i := 0; i < 2; i++ {
		args := append(append([]string{}, m.SupervisorCommand[1:]...), "--dir", m.Dir, "--name", "racer", "--", "/bin/sleep", "1000")
		cmd := exec.Command(m.SupervisorCommand[0], args...)
		cmd.Env = append(os.Environ(), m.Env...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	t.Cleanup(func() {
		for _, c := range cmds {
			c.Process.Kill()
		}
	})
	// One of them leaves at once; the other keeps the service running.
	exited := make(chan *exec.Cmd, 2)
	for _, c := range cmds {
		go func() { c.Wait(); exited <- c }()
	}
	select {
	case c := <-exited:
		if !c.ProcessState.Success() {
			t.Fatalf("the second supervisor exited with %v, want 0", c.ProcessState)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("both supervisors are still running")
	}
	waitFor(t, "the service", func() bool { return m.ChildPID("racer") > 0 })
	child := m.ChildPID("racer")
	if err := m.Stop(ctx, "racer"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatal("the remaining supervisor did not stop")
	}
	waitFor(t, "the service to stop", func() bool { return !alive(child) })
}
