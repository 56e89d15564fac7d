package install

import (
	"context"
	"fmt"
	"time"
)

// Job is one long piece of work on a host: a phase's script (install,
// kubeadm init, kubeadm join). The phase's name and the script's
// checksum name the job on the host, so that a second Run of the same
// job finds the first instead of starting it again.
type Job struct {
	// Name is the phase, e.g. "install".
	Name string
	// Script is run whole by bash -euo pipefail.
	Script string
	// Secrets are masked wherever the job's output is shown: in the
	// result, in errors, in logs.
	Secrets []string
	// Deadline bounds the job from the start of the Run that waits for
	// it; when it passes, the job's processes are killed. Zero: only the
	// context's deadline bounds it.
	Deadline time.Duration
}

// Result is how a job ended.
type Result struct {
	// Output is the end of the job's output (standard output and error),
	// secrets masked.
	Output string
	// Attached is set when this Run found the job already started (or
	// finished) by an earlier one, whose connection was lost.
	Attached bool
}

// Querier runs short commands on a host: reads of its state, a token,
// a kubectl apply. They are run over the connection, not detached: each
// is idempotent or harmless to repeat, and a lost connection simply
// fails it.
type Querier interface {
	Query(ctx context.Context, what, script string, secrets ...string) ([]byte, error)
}

// Executor runs a host's work. Run runs a job to its end (or its
// deadline) so that a lost connection neither runs half of it nor
// leaves it orphaned; Query runs a short command.
type Executor interface {
	Querier
	// Run returns a *JobError when the job ended with a failure, a
	// *DeadlineError when its deadline passed (its processes killed),
	// and an *UnreachableError when the host could not be reached; the
	// job then goes on on the host, and a later Run attaches to it.
	Run(ctx context.Context, job Job) (Result, error)
	// Close ends the connection.
	Close() error
}

// Connector opens an executor on host name at address (the install
// config's when empty).
type Connector func(ctx context.Context, name, address string) (Executor, error)

// DeadlineError is a job or a phase that passed its deadline. The job's
// processes were killed and the connection closed.
type DeadlineError struct {
	Host, Phase string
	Deadline    time.Duration
	// Detail says what was still missing, or how the kill went.
	Detail string
}

func (e *DeadlineError) Error() string {
	s := fmt.Sprintf("%s on %s did not end within its deadline of %v", e.Phase, e.Host, e.Deadline)
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// JobError is a job that ended with a failure.
type JobError struct {
	Host, Phase string
	ExitCode    int
	// Output is the end of its output, secrets masked.
	Output string
}

func (e *JobError) Error() string {
	return fmt.Sprintf("%s on %s failed (exit status %d): %s", e.Phase, e.Host, e.ExitCode, e.Output)
}
