package install

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/bootstick/bootstick/internal/sshtest"
	"github.com/bootstick/bootstick/internal/testctx"
)

// shellHost is an SSH server that runs each command with bash on this
// machine, as a host's sshd does; mangle, when set, changes a command's
// standard input on its way (a stream damaged in transit), and answered
// hears each command's output.
type shellHost struct {
	srv      *sshtest.Server
	key      ssh.Signer
	mangle   func(cmd, stdin string) string
	answered chan string
}

func newShellHost(t *testing.T) *shellHost {
	t.Helper()
	h := &shellHost{answered: make(chan string, 64), key: testSigner(t)}
	h.srv = sshtest.Start(t, h.key.PublicKey(), func(cmd, stdin string) (string, string, uint32) {
		if h.mangle != nil {
			stdin = h.mangle(cmd, stdin)
		}
		c := exec.Command("bash", "-c", cmd)
		var out, errb bytes.Buffer
		c.Stdin, c.Stdout, c.Stderr = strings.NewReader(stdin), &out, &errb
		status := uint32(0)
		if err := c.Run(); err != nil {
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				return "", err.Error(), 255
			}
			status = uint32(exit.ExitCode())
		}
		select {
		case h.answered <- out.String():
		default:
		}
		return out.String(), errb.String(), status
	})
	return h
}

// executor dials addr (the server's, or a cutter's in front of it) and
// runs jobs in dir.
func (h *shellHost) executor(t *testing.T, ctx context.Context, addr, dir string) *SSHExecutor {
	t.Helper()
	c, err := Dial(ctx, addr, h.key, h.srv.HostKey)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	e := NewSSHExecutor("node-1", c)
	e.Dir = dir
	// A test that fails leaves no job of its running.
	t.Cleanup(func() {
		pids, _ := filepath.Glob(filepath.Join(dir, "*.pid"))
		for _, f := range pids {
			if b, err := os.ReadFile(f); err == nil {
				if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 {
					syscall.Kill(-pid, syscall.SIGKILL)
				}
			}
		}
	})
	return e
}

// fastJobs shortens the polls and the kill's grace for a test.
func fastJobs(t *testing.T) {
	t.Helper()
	oldP, oldG := PollWait, KillGrace
	PollWait, KillGrace = time.Second, time.Second
	t.Cleanup(func() { PollWait, KillGrace = oldP, oldG })
}

func mkfifo(t *testing.T, path string) {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
}

func countLines(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// TestExecutorRunsAJobOnce: a job runs once, detached, and its output
// comes back with its secrets masked; its result and script are cleared
// once read (its log stays), so the same job runs anew next time. A job
// that fails returns a JobError with its exit status and the end of its
// output, masked too.
func TestExecutorRunsAJobOnce(t *testing.T) {
	fastJobs(t)
	ctx, cancel := testctx.New(t, time.Minute)
	defer cancel()
	h := newShellHost(t)
	dir, work := t.TempDir(), t.TempDir()
	e := h.executor(t, ctx, h.srv.Addr, dir)

	job := Job{Name: "install", Script: "echo ran >>" + work + "/count\necho 'installed with hunter2'\n", Secrets: []string{"hunter2"}, Deadline: time.Minute}
	res, err := e.Run(ctx, job)
	if err != nil || res.Attached || strings.TrimSpace(res.Output) != "installed with [redacted]" {
		t.Fatalf("Run = %+v, %v; want the output, masked, from a job it started", res, err)
	}
	if n := countLines(t, work+"/count"); n != 1 {
		t.Errorf("the script ran %d times, want once", n)
	}
	id, _ := jobID(job)
	for _, f := range []string{".rc", ".sh", ".pid"} {
		if _, err := os.Stat(filepath.Join(dir, id+f)); err == nil {
			t.Errorf("%s left after its result was read", id+f)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, id+".log")); err != nil {
		t.Errorf("the job's log is gone: %v", err)
	}
	if _, err := e.Run(ctx, job); err != nil || countLines(t, work+"/count") != 2 {
		t.Errorf("the same job again, after its result was read: %v, ran %d times in all, want twice", err, countLines(t, work+"/count"))
	}

	_, err = e.Run(ctx, Job{Name: "init", Script: "echo 'token abcdef.0123456789abcdef refused, key hunter2' >&2\nexit 5\n", Secrets: []string{"hunter2"}})
	var je *JobError
	if !errors.As(err, &je) || je.ExitCode != 5 || je.Host != "node-1" || je.Phase != "init" || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("a failing job: %v, want a JobError with exit status 5", err)
	}
	if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "abcdef.0123456789abcdef") {
		t.Errorf("a job's error shows a secret: %v", err)
	}
}

// TestExecutorCutStreamAttaches: the connection is cut while a job runs
// (the host silent, no reset sent). The Run fails as unreachable, the job
// goes on on the host, and a second Run over a new connection attaches
// to it, gets its result when it ends, and the script has run exactly
// once.
func TestExecutorCutStreamAttaches(t *testing.T) {
	ctx, h, dir, work := cutTest(t)
	job := Job{Name: "init", Deadline: time.Minute, Secrets: []string{"s3cret"}, Script: "echo run >>" + work + "/count\n" +
		"echo up >" + work + "/started\nread _ <" + work + "/release\necho 'created; token abcdef.0123456789abcdef s3cret'\n"}

	var un *UnreachableError
	if err := h.cutWhileRunning(t, ctx, dir, work, job); !errors.As(err, &un) {
		t.Fatalf("a Run whose connection was cut: %v, want unreachable", err)
	}

	// The BPA's next try, over a new connection, while the job runs: its
	// start finds the job running and attaches.
	again := h.retryWhileRunning(t, ctx, dir, job, func(out string) bool { return out == "running\n" })
	if err := os.WriteFile(work+"/release", []byte("go\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := <-again
	if r.err != nil || !r.res.Attached || strings.TrimSpace(r.res.Output) != "created; token [redacted] [redacted]" {
		t.Fatalf("the second Run: %+v %v; want the job's output, masked, attached", r.res, r.err)
	}
	if n := countLines(t, work+"/count"); n != 1 {
		t.Errorf("the script ran %d times over a cut connection and a second Run, want once", n)
	}
}

// TestExecutorWaitsForAnEarlierJobOfItsPhase: a join's script differs
// from try to try (a new token each). When the connection of one try was
// cut while its job ran, the next try's job does not run beside it: its
// Run waits for the earlier one to end, then starts its own.
func TestExecutorWaitsForAnEarlierJobOfItsPhase(t *testing.T) {
	ctx, h, dir, work := cutTest(t)
	earlier := Job{Name: "join", Script: "echo earlier >>" + work + "/order\necho up >" + work + "/started\nread _ <" + work + "/release\n"}
	next := Job{Name: "join", Script: "echo next >>" + work + "/order\necho joined\n"}

	if err := h.cutWhileRunning(t, ctx, dir, work, earlier); err == nil {
		t.Fatal("a Run whose connection was cut ended well")
	}
	again := h.retryWhileRunning(t, ctx, dir, next, func(out string) bool { return strings.HasPrefix(out, "busy join-") })
	if err := os.WriteFile(work+"/release", []byte("go\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := <-again
	if r.err != nil || strings.TrimSpace(r.res.Output) != "joined" {
		t.Fatalf("the next try: %+v %v", r.res, r.err)
	}
	if b, _ := os.ReadFile(work + "/order"); string(b) != "earlier\nnext\n" {
		t.Errorf("the jobs ran %q, want the earlier to its end, then the next", b)
	}
}

// cutTest sets up a cut-connection test: fast jobs and keepalives, a
// shell host, the executor's folder (dir), and a folder (work) with the
// fifos a job signals on: started (it writes "up") and release (it reads).
func cutTest(t *testing.T) (ctx context.Context, h *shellHost, dir, work string) {
	t.Helper()
	fastJobs(t)
	setServerAlive(t, 50*time.Millisecond, 4)
	ctx, cancel := testctx.New(t, time.Minute)
	t.Cleanup(cancel)
	h = newShellHost(t)
	dir, work = t.TempDir(), t.TempDir()
	mkfifo(t, work+"/started")
	mkfifo(t, work+"/release")
	return ctx, h, dir, work
}

// cutWhileRunning runs job over a connection through a cutter, waits
// until the job writes "up" to work/started, cuts the connection (the
// host silent, no reset sent), and returns the Run's error.
func (h *shellHost) cutWhileRunning(t *testing.T, ctx context.Context, dir, work string, job Job) error {
	t.Helper()
	cut := newCutter(t, h.srv.Addr)
	first := h.executor(t, ctx, cut.addr, dir)
	done := make(chan error, 1)
	go func() {
		_, err := first.Run(ctx, job)
		done <- err
	}()
	started, err := os.ReadFile(work + "/started") // the job runs
	if err != nil || strings.TrimSpace(string(started)) != "up" {
		t.Fatalf("the job did not start: %q %v", started, err)
	}
	cut.Cut()
	select {
	case err = <-done:
		return err
	case <-ctx.Done():
		t.Fatal("the Run still waits on a cut connection")
		return nil
	}
}

// ran is a Run's result.
type ran struct {
	res Result
	err error
}

// retryWhileRunning is the BPA's next try of job, over a new connection,
// while an earlier job still runs: it starts the Run and returns once the
// host's answer to its start satisfies found. The Run must not end first.
func (h *shellHost) retryWhileRunning(t *testing.T, ctx context.Context, dir string, job Job, found func(answer string) bool) <-chan ran {
	t.Helper()
	for len(h.answered) > 0 {
		<-h.answered
	}
	second := h.executor(t, ctx, h.srv.Addr, dir)
	again := make(chan ran, 1)
	go func() {
		res, err := second.Run(ctx, job)
		again <- ran{res, err}
	}()
	for {
		select {
		case out := <-h.answered:
			if found(out) {
				return again
			}
		case r := <-again:
			t.Fatalf("the next try ended while the earlier job ran: %+v %v", r.res, r.err)
		case <-ctx.Done():
			t.Fatal("the next try never found the earlier job")
		}
	}
}

// TestExecutorRefusesAWrongChecksum: a script damaged on its way (here,
// one byte changed) fails its checksum on the host and never starts.
func TestExecutorRefusesAWrongChecksum(t *testing.T) {
	fastJobs(t)
	ctx, cancel := testctx.New(t, time.Minute)
	defer cancel()
	h := newShellHost(t)
	dir, work := t.TempDir(), t.TempDir()
	h.mangle = func(cmd, stdin string) string { return strings.Replace(stdin, "echo ran", "echo RAN", 1) }
	e := h.executor(t, ctx, h.srv.Addr, dir)
	_, err := e.Run(ctx, Job{Name: "install", Script: "echo ran >>" + work + "/count\n"})
	if err == nil || !strings.Contains(err.Error(), "SHA-256") || !strings.Contains(err.Error(), "not started") {
		t.Fatalf("a damaged script: %v, want it refused for its checksum", err)
	}
	if n := countLines(t, work+"/count"); n != 0 {
		t.Errorf("a damaged script ran %d times", n)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.Name() != ".start.lock" { // the start's lock stays
			t.Errorf("a damaged script left %s in the jobs folder", e.Name())
		}
	}
}

// deadlineCtx is a context whose deadline the test passes when it says:
// Done closes and Err is DeadlineExceeded, as at a real deadline, with no
// clock in the test.
type deadlineCtx struct {
	context.Context
	done chan struct{}
}

func (c *deadlineCtx) Done() <-chan struct{} { return c.done }
func (c *deadlineCtx) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// TestExecutorSilentHostDeadlineKillsTheJob: a job that never ends (a
// kubeadm hung on a host that stays silent) passes its deadline: every
// process of its group is killed, the Run returns a DeadlineError naming
// the host, the phase and the deadline, and the connection is closed.
// The job's own Deadline does the same.
func TestExecutorSilentHostDeadlineKillsTheJob(t *testing.T) {
	fastJobs(t)
	ctx, cancel := testctx.New(t, time.Minute)
	defer cancel()
	h := newShellHost(t)
	dir, work := t.TempDir(), t.TempDir()
	mkfifo(t, work+"/started")
	e := h.executor(t, ctx, h.srv.Addr, dir)
	job := Job{Name: "join", Script: "sleep 1000 &\necho $! >" + work + "/child\necho $$ >" + work + "/self\necho up >" + work + "/started\nwait\n"}

	dctx := &deadlineCtx{Context: ctx, done: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		_, err := e.Run(dctx, job)
		done <- err
	}()
	if _, err := os.ReadFile(work + "/started"); err != nil {
		t.Fatal(err)
	}
	close(dctx.done) // the deadline passes
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		t.Fatal("the Run did not end at its deadline")
	}
	var de *DeadlineError
	if !errors.As(err, &de) || de.Host != "node-1" || de.Phase != "join" || !strings.Contains(err.Error(), "join on node-1 did not end within its deadline") {
		t.Fatalf("a job past its deadline: %v, want a DeadlineError naming the host and the phase", err)
	}
	for _, f := range []string{"self", "child"} {
		b, err := os.ReadFile(filepath.Join(work, f))
		if err != nil {
			t.Fatal(err)
		}
		if pid, _ := strconv.Atoi(strings.TrimSpace(string(b))); running(pid) {
			t.Errorf("the job's %s process %d still runs after its deadline", f, pid)
		}
	}
	if _, err := e.Query(ctx, "anything", "true"); err == nil {
		t.Error("the connection is still open after the deadline")
	}

	// The job's own deadline.
	e = h.executor(t, ctx, h.srv.Addr, dir)
	_, err = e.Run(ctx, Job{Name: "install", Script: "sleep 1000\n", Deadline: time.Second})
	if !errors.As(err, &de) || de.Deadline != time.Second || !strings.Contains(err.Error(), "deadline of 1s") {
		t.Fatalf("a job past its own deadline: %v", err)
	}
	if ents, _ := filepath.Glob(filepath.Join(dir, "install-*.pid")); len(ents) != 0 {
		t.Errorf("a killed job is still on the host's books: %v", ents)
	}
}

// running reports whether pid is a live process (a zombie is not).
func running(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	rest := s[strings.LastIndex(s, ")")+1:]
	return !strings.HasPrefix(strings.TrimSpace(rest), "Z")
}
