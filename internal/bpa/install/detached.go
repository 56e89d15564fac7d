package install

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
)

// JobsDir is where a host keeps the BPA's jobs: their scripts, output
// and results. Only root reads it (the scripts of joins carry a token).
const JobsDir = "/var/lib/bootstick/jobs"

// Bounds of a detached job's bookkeeping. PollWait is how long one poll
// waits on the host for the job to end before it answers "running": each
// poll is one SSH command, so the BPA sees the end within PollWait and
// checks its own deadline at least that often. KillGrace is how long the
// job's processes get after SIGTERM before SIGKILL (the kubeadm scripts
// ignore SIGTERM, so that one always comes); KillTimeout bounds the whole
// kill, which runs after the deadline on a context of its own.
var (
	PollWait    = 10 * time.Second
	KillGrace   = 10 * time.Second
	KillTimeout = time.Minute
)

//go:embed jobs/job.sh
var jobSh string

// SSHExecutor runs jobs detached on a host over SSH. A job's script is
// uploaded through the session's standard input, checked against its
// SHA-256 on the host, and started in a session of its own (setsid),
// which outlives the connection; its exit status lands in a result file
// written only when it ended. The BPA then polls for that file. A lost
// connection leaves the job running, and the next Run of the same job
// (same phase, same script) attaches to it, or reads its result, instead
// of starting it again; a script cut in transit fails its checksum and
// never starts. A job of the same phase with another script (a join's
// changes with each token) that still runs is waited for, never run
// beside.
//
// setsid rather than systemd-run: it is in util-linux, on every host the
// stick installs and on any machine the tests run on (which may have no
// systemd), so the path the tests prove is the one real hosts take.
type SSHExecutor struct {
	c *Client
	// Host names the host in errors.
	Host string
	// Dir is the host's jobs folder (JobsDir when empty).
	Dir string
}

// NewSSHExecutor runs jobs on host name over c.
func NewSSHExecutor(name string, c *Client) *SSHExecutor {
	return &SSHExecutor{c: c, Host: name}
}

// SSH is the Connector of real hosts: it dials each with key, pinning
// the host key the config gives.
func SSH(cfg *Config, key ssh.Signer) Connector {
	return func(ctx context.Context, name, address string) (Executor, error) {
		c, err := Connect(ctx, cfg, key, name, address)
		if err != nil {
			return nil, err
		}
		return NewSSHExecutor(name, c), nil
	}
}

// Query runs script over the connection and returns its standard output.
func (e *SSHExecutor) Query(ctx context.Context, what, script string, secrets ...string) ([]byte, error) {
	return e.c.Run(ctx, what, script, secrets...)
}

// Close closes the connection.
func (e *SSHExecutor) Close() error { return e.c.Close() }

func (e *SSHExecutor) dir() string {
	if e.Dir != "" {
		return e.Dir
	}
	return JobsDir
}

// jobID names a job on the host: its phase and its script's checksum.
func jobID(j Job) (id, sum string) {
	s := sha256.Sum256([]byte(j.Script))
	sum = hex.EncodeToString(s[:])
	return j.Name + "-" + sum[:16], sum
}

var actionVerb = map[string]string{"start": "starting", "poll": "watching", "forget": "clearing", "kill": "killing"}

// action runs one action of job.sh on the host, with stdin as its
// standard input.
func (e *SSHExecutor) action(ctx context.Context, j Job, stdin string, args ...string) (string, error) {
	cmd := "bash -c " + shellQuote(jobSh) + " bpa-job"
	for _, a := range args {
		cmd += " " + shellQuote(a)
	}
	s, err := e.c.c.NewSession()
	if err != nil {
		return "", e.c.lost(err)
	}
	defer s.Close()
	var out, errb strings.Builder
	s.Stdin = strings.NewReader(stdin)
	s.Stdout, s.Stderr = &out, &errb
	done := make(chan error, 1)
	go func() { done <- s.Run(cmd) }()
	select {
	case err = <-done:
	case <-ctx.Done():
		s.Close()
		return "", ctx.Err()
	}
	if err != nil {
		var exit *ssh.ExitError
		if !errors.As(err, &exit) {
			return "", e.c.lost(err)
		}
		return "", fmt.Errorf("%s the %s job on %s: %s (exit status %d)", actionVerb[args[0]], j.Name, e.Host,
			Redact(tail(errb.String(), 4), j.Secrets...), exit.ExitStatus())
	}
	return out.String(), nil
}

// Run runs j detached on the host and waits for its end, its deadline or
// the context. When ctx is cancelled (the BPA stops) the job goes on on
// the host; when a deadline passes (j's or ctx's), its processes are
// killed and the connection closed.
func (e *SSHExecutor) Run(ctx context.Context, j Job) (Result, error) {
	id, sum := jobID(j)
	start := time.Now()
	rctx, cancel := ctx, context.CancelFunc(func() {})
	if j.Deadline > 0 {
		rctx, cancel = context.WithTimeout(ctx, j.Deadline)
	}
	defer cancel()

	res, watched, err := e.wait(rctx, j, id, sum)
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		return res, err
	}
	// A deadline passed (the job's or the caller's): stop the job so
	// that nothing of it runs on, unwatched, and close the connection.
	// The job's deadline is the one the caller set (the controller sets
	// a phase's to the deadline of its context too); without one, how
	// long this Run waited.
	d := j.Deadline
	if d == 0 {
		d = time.Since(start).Round(time.Second)
	}
	de := &DeadlineError{Host: e.Host, Phase: j.Name, Deadline: d, Detail: "its processes were killed"}
	kctx, kcancel := context.WithTimeout(context.WithoutCancel(ctx), KillTimeout)
	defer kcancel()
	if _, kerr := e.action(kctx, j, "", "kill", e.dir(), watched, strconv.Itoa(int(KillGrace/time.Second))); kerr != nil {
		de.Detail = "killing its processes failed: " + Redact(kerr.Error(), j.Secrets...)
	}
	e.Close()
	return Result{}, de
}

// wait starts j (or attaches to it) and polls until it ends. It returns
// the job it watched last, for a kill.
func (e *SSHExecutor) wait(ctx context.Context, j Job, id, sum string) (Result, string, error) {
	for {
		out, err := e.action(ctx, j, j.Script, "start", e.dir(), id, sum)
		if err != nil {
			return Result{}, id, err
		}
		st := strings.TrimSpace(out)
		if other, ok := strings.CutPrefix(st, "busy "); ok {
			// An earlier job of this phase still runs, left by a Run whose
			// connection was lost with another script (a join's differs
			// each try: a new token). Wait for its end (its result was
			// that Run's), then start this one: two never run at once,
			// and this Run's deadline bounds the earlier one too.
			if _, _, err := e.result(ctx, j, other); err != nil && !errors.Is(err, errGone) {
				return Result{}, other, err
			}
			continue
		}
		rc, log, err := e.result(ctx, j, id)
		if err != nil {
			return Result{}, id, err
		}
		res := Result{Attached: st != "started", Output: Redact(log, j.Secrets...)}
		if rc != 0 {
			return res, id, &JobError{Host: e.Host, Phase: j.Name, ExitCode: rc, Output: tail(res.Output, 6)}
		}
		return res, id, nil
	}
}

// errGone is a job that stopped without a result.
var errGone = errors.New("stopped without a result (did the host restart?)")

// result polls job id until it ends, clears its result, and returns its
// exit status and the end of its output (not yet redacted).
func (e *SSHExecutor) result(ctx context.Context, j Job, id string) (int, string, error) {
	wait := strconv.Itoa(max(1, int(PollWait/time.Second)))
	for {
		out, err := e.action(ctx, j, "", "poll", e.dir(), id, wait)
		if err != nil {
			return 0, "", err
		}
		status, log, _ := strings.Cut(out, "\n")
		switch {
		case status == "running":
			continue
		case status == "gone":
			e.forget(ctx, j, id)
			return 0, "", fmt.Errorf("%s on %s %w: %s", j.Name, e.Host, errGone, Redact(tail(log, 6), j.Secrets...))
		case strings.HasPrefix(status, "finished "):
			rc, err := strconv.Atoi(strings.TrimPrefix(status, "finished "))
			if err != nil {
				return 0, "", fmt.Errorf("%s on %s: a result file that holds %q", j.Name, e.Host, status)
			}
			// Read, then forget: a connection lost in between leaves the
			// result for the next Run, never the job run twice.
			e.forget(ctx, j, id)
			return rc, log, nil
		default:
			return 0, "", fmt.Errorf("%s on %s: the job's poll answered %q", j.Name, e.Host, Redact(status, j.Secrets...))
		}
	}
}

// forget removes a read result. Failing, it leaves the result for the
// next Run to read again, which is harmless: the job does not run again.
func (e *SSHExecutor) forget(ctx context.Context, j Job, id string) {
	_, _ = e.action(ctx, j, "", "forget", e.dir(), id)
}
