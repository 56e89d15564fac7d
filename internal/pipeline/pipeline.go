// Package pipeline runs an ordered list of steps resumably: it records each
// step's start, end, duration and last error in a state file written
// atomically, skips the steps a previous run finished, and holds an
// exclusive lock so that only one run happens at a time. A failure stops the
// run and leaves everything done so far in place.
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/bootstick/bootstick/internal/logctx"
)

// Step is one named, re-runnable piece of work.
type Step struct {
	Name string
	// Run does the step. It must be safe to run again after a crash at any
	// point inside it.
	Run func(ctx context.Context, pc *Context) error
	// Done, when set, tells whether the step's effect is already in place,
	// without changing anything. The runner asks it before skipping a step
	// recorded as done (false re-runs the step) and before running a step
	// not yet recorded (true records it done without running it).
	Done func(ctx context.Context, pc *Context) (bool, error)
	// Hint tells a person what to do when the step fails; it is recorded
	// with the failure and shown by status.
	Hint string
}

// Context is what a step gets besides the context.Context, whose logger
// (logctx.From) names the step.
type Context struct {
	Observer Observer
	// Index and Total place the current step (1-based) in the run.
	Index, Total int
	// Record is the current step's record as loaded (Attempts counts this
	// attempt); steps may read it, the runner writes it.
	Record StepRecord
}

// Progress reports where the running step stands: systemd's STATUS and
// the console show detail until the next event.
func (c *Context) Progress(step, detail string) {
	if c == nil || c.Observer == nil {
		return
	}
	c.Observer.Update(Event{Step: step, Index: c.Index, Total: c.Total, Phase: PhaseProgress, Detail: detail})
}

// Phase is what happened to a step.
type Phase string

const (
	PhaseStarted Phase = "started"
	PhaseDone    Phase = "done"
	PhaseSkipped Phase = "skipped" // done by an earlier run, or found in place
	PhaseFailed  Phase = "failed"
	// PhaseProgress is a running step's report of where it stands
	// (Detail), e.g. the site's hosts by state.
	PhaseProgress Phase = "progress"
)

// Event is one progress report.
type Event struct {
	Step         string
	Index, Total int
	Phase        Phase
	Duration     time.Duration // for done and failed
	Err          error         // for failed
	Detail       string        // for progress
}

// Observer receives the runner's events: STATUS lines, the console, a test.
type Observer interface {
	Update(Event)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(Event)

func (f ObserverFunc) Update(e Event) { f(e) }

// Multi fans events out to several Observers; nil entries are ignored.
func Multi(ps ...Observer) Observer {
	return ObserverFunc(func(e Event) {
		for _, p := range ps {
			if p != nil {
				p.Update(e)
			}
		}
	})
}

// Runner runs steps with a state file in Dir.
type Runner struct {
	// Dir holds the state file (state.json) and, unless LockFile is set,
	// the lock (lock).
	Dir string
	// LockFile is the lock; default LockPath(Dir). A state folder that a
	// step may mount over (the data disk) needs a lock elsewhere.
	LockFile string
	Steps    []Step
	Observer Observer // may be nil
	Now      func() time.Time
}

// StatePath is the state file in dir.
func StatePath(dir string) string { return filepath.Join(dir, "state.json") }

// LockPath is the lock file in dir.
func LockPath(dir string) string { return filepath.Join(dir, "lock") }

// StepError says which step failed.
type StepError struct {
	Step string
	Err  error
}

func (e *StepError) Error() string { return fmt.Sprintf("step %s: %v", e.Step, e.Err) }
func (e *StepError) Unwrap() error { return e.Err }

// Run takes the lock, runs every step not already done, and returns the
// first failure as a *StepError. A *LockedError means another run holds the
// lock.
func (r *Runner) Run(ctx context.Context) error {
	log := logctx.From(ctx)
	now := r.Now
	if now == nil {
		now = time.Now
	}
	progress := r.Observer
	if progress == nil {
		progress = ObserverFunc(func(Event) {})
	}
	if err := checkNames(r.Steps); err != nil {
		return err
	}
	if err := os.MkdirAll(r.Dir, 0o755); err != nil {
		return fmt.Errorf("creating state folder: %w", err)
	}
	lockPath := r.LockFile
	if lockPath == "" {
		lockPath = LockPath(r.Dir)
	}
	if err := os.MkdirAll(filepath.Dir(lockPath), 0o755); err != nil {
		return fmt.Errorf("creating lock folder: %w", err)
	}
	lock, err := AcquireLock(lockPath)
	if err != nil {
		return err
	}
	defer lock.Release()

	statePath := StatePath(r.Dir)
	st, err := LoadState(statePath)
	if err != nil {
		return err
	}
	st = reorder(st, r.Steps)
	st.Started = now()
	st.Finished = time.Time{}
	if err := SaveState(statePath, st); err != nil {
		return err
	}

	n := len(r.Steps)
	for i, step := range r.Steps {
		if err := ctx.Err(); err != nil {
			return err
		}
		name := step.Name
		rec := st.Step(name)
		// Done sees the record as loaded, so it can tell a step recorded
		// done (be sure before redoing it) from one never finished.
		pc := &Context{Observer: progress, Index: i + 1, Total: n, Record: *rec}
		ctx := logctx.With(ctx, log.With("step", name))
		hasDone := step.Done != nil

		if rec.State == StateDone {
			redo := false
			if hasDone {
				done, err := step.Done(ctx, pc)
				if err != nil {
					return r.fail(ctx, statePath, st, rec, step, pc, now(), fmt.Errorf("checking whether it is done: %w", err))
				}
				redo = !done
			}
			if !redo {
				log.Info(fmt.Sprintf("step %s (%d/%d): already done", name, i+1, n))
				progress.Update(Event{Step: name, Index: i + 1, Total: n, Phase: PhaseSkipped})
				continue
			}
			log.Info(fmt.Sprintf("step %s (%d/%d): recorded done but its effect is gone; running it again", name, i+1, n))
		} else if rec.State == StateRunning {
			log.Info(fmt.Sprintf("step %s (%d/%d): interrupted in an earlier run; running it again", name, i+1, n))
		}

		start := now()
		rec.State, rec.Started, rec.Ended, rec.Duration, rec.Skipped = StateRunning, start, time.Time{}, 0, false
		rec.Attempts++
		pc.Record = *rec
		if err := SaveState(statePath, st); err != nil {
			return err
		}
		progress.Update(Event{Step: name, Index: i + 1, Total: n, Phase: PhaseStarted})

		skipped := false
		var runErr error
		if hasDone {
			done, err := step.Done(ctx, pc)
			switch {
			case err != nil:
				runErr = fmt.Errorf("checking whether it is done: %w", err)
			case done:
				skipped = true
			}
		}
		if runErr == nil && !skipped {
			runErr = step.Run(ctx, pc)
		}
		if runErr != nil {
			return r.fail(ctx, statePath, st, rec, step, pc, now(), runErr)
		}
		end := now()
		// What the step wrote (kubeadm's certificates, say) reaches the
		// disk before the state says done: after a power cut, a step
		// recorded done has its files whole.
		syscall.Sync()
		rec.State, rec.Ended, rec.Duration, rec.Error, rec.Hint, rec.Skipped = StateDone, end, end.Sub(start), "", "", skipped
		rec.Completed = end
		if err := SaveState(statePath, st); err != nil {
			return err
		}
		if skipped {
			log.Info(fmt.Sprintf("step %s (%d/%d): already in place", name, i+1, n))
			progress.Update(Event{Step: name, Index: i + 1, Total: n, Phase: PhaseSkipped})
		} else {
			log.Info(fmt.Sprintf("step %s (%d/%d): done in %s", name, i+1, n, round(rec.Duration)))
			progress.Update(Event{Step: name, Index: i + 1, Total: n, Phase: PhaseDone, Duration: rec.Duration})
		}
	}
	st.Finished = now()
	return SaveState(statePath, st)
}

func (r *Runner) fail(ctx context.Context, statePath string, st *State, rec *StepRecord, step Step, pc *Context, end time.Time, err error) error {
	rec.State, rec.Ended, rec.Error, rec.Hint = StateFailed, end, err.Error(), step.Hint
	if !rec.Started.IsZero() {
		rec.Duration = end.Sub(rec.Started)
	}
	if serr := SaveState(statePath, st); serr != nil {
		logctx.From(ctx).Error("recording the failure", "err", serr)
	}
	logctx.From(ctx).Error(fmt.Sprintf("step %s (%d/%d): failed after %s", rec.Name, pc.Index, pc.Total, round(rec.Duration)), "err", err)
	pc.Observer.Update(Event{Step: rec.Name, Index: pc.Index, Total: pc.Total, Phase: PhaseFailed, Duration: rec.Duration, Err: err})
	return &StepError{Step: rec.Name, Err: err}
}

// reorder returns a state with one record per step, in step order, keeping
// what was recorded for steps of the same name.
func reorder(st *State, steps []Step) *State {
	out := &State{Version: StateVersion, Started: st.Started, Finished: st.Finished}
	for _, s := range steps {
		if rec := st.Step(s.Name); rec != nil {
			out.Steps = append(out.Steps, *rec)
		} else {
			out.Steps = append(out.Steps, StepRecord{Name: s.Name, State: StatePending})
		}
	}
	return out
}

func checkNames(steps []Step) error {
	seen := map[string]bool{}
	for _, s := range steps {
		if s.Name == "" {
			return errors.New("a step has no name")
		}
		if s.Run == nil {
			return fmt.Errorf("step %q has nothing to run", s.Name)
		}
		if seen[s.Name] {
			return fmt.Errorf("two steps are named %q", s.Name)
		}
		seen[s.Name] = true
	}
	return nil
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= 10*time.Second:
		return d.Round(time.Second)
	case d >= time.Second:
		return d.Round(100 * time.Millisecond)
	default:
		return d.Round(time.Millisecond)
	}
}
