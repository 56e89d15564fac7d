package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bootstick/bootstick/internal/logctx"
)

// fakeStep counts its runs and fails or reports done as told.
type fakeStep struct {
	name string
	runs int
	err  error
	// done, when not nil, makes the step a Doner answering *done.
	done *bool
}

func (s *fakeStep) run(ctx context.Context, pc *Context) error {
	s.runs++
	return s.err
}

func (s *fakeStep) step() Step {
	st := Step{Name: s.name, Run: s.run}
	if s.done != nil {
		st.Done = func(context.Context, *Context) (bool, error) { return *s.done, nil }
	}
	return st
}

func steps(fs ...*fakeStep) []Step {
	out := make([]Step, len(fs))
	for i, f := range fs {
		out[i] = f.step()
	}
	return out
}

func ptr(b bool) *bool { return &b }

// quiet is a context whose logger discards.
var quiet = logctx.With(context.Background(), logctx.Discard())

func TestRunner(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name string
		// prior state, by step name
		prior    map[string]string
		steps    []*fakeStep
		wantErr  string
		wantRuns []int
		want     map[string]string
	}{
		{
			name:     "fresh run does every step",
			steps:    []*fakeStep{{name: "a"}, {name: "b"}, {name: "c"}},
			wantRuns: []int{1, 1, 1},
			want:     map[string]string{"a": StateDone, "b": StateDone, "c": StateDone},
		},
		{
			name:     "failure stops the run and keeps what was done",
			steps:    []*fakeStep{{name: "a"}, {name: "b", err: boom}, {name: "c"}},
			wantErr:  "step b: boom",
			wantRuns: []int{1, 1, 0},
			want:     map[string]string{"a": StateDone, "b": StateFailed, "c": StatePending},
		},
		{
			name:     "resume skips done steps and reruns failed and interrupted ones",
			prior:    map[string]string{"a": StateDone, "b": StateFailed, "c": StateRunning},
			steps:    []*fakeStep{{name: "a"}, {name: "b"}, {name: "c"}},
			wantRuns: []int{0, 1, 1},
			want:     map[string]string{"a": StateDone, "b": StateDone, "c": StateDone},
		},
		{
			name:     "done step whose effect is gone runs again",
			prior:    map[string]string{"a": StateDone, "b": StateDone},
			steps:    []*fakeStep{{name: "a", done: ptr(false)}, {name: "b", done: ptr(true)}},
			wantRuns: []int{1, 0},
			want:     map[string]string{"a": StateDone, "b": StateDone},
		},
		{
			name:     "step found in place is recorded without running",
			steps:    []*fakeStep{{name: "a", done: ptr(true)}, {name: "b"}},
			wantRuns: []int{0, 1},
			want:     map[string]string{"a": StateDone, "b": StateDone},
		},
		{
			name:     "a new step list keeps records by name",
			prior:    map[string]string{"old": StateDone, "a": StateDone},
			steps:    []*fakeStep{{name: "a"}, {name: "new"}},
			wantRuns: []int{0, 1},
			want:     map[string]string{"a": StateDone, "new": StateDone},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if tt.prior != nil {
				st := &State{Version: StateVersion}
				for name, state := range tt.prior {
					st.Steps = append(st.Steps, StepRecord{Name: name, State: state, Attempts: 1})
				}
				if err := SaveState(StatePath(dir), st); err != nil {
					t.Fatal(err)
				}
			}
			var logs bytes.Buffer
			var events []Event
			r := &Runner{Dir: dir, Steps: steps(tt.steps...),
				Observer: ObserverFunc(func(e Event) { events = append(events, e) })}
			err := r.Run(logctx.With(context.Background(), slog.New(slog.NewTextHandler(&logs, nil))))
			if tt.wantErr == "" && err != nil {
				t.Fatalf("Run: %v", err)
			}
			if tt.wantErr != "" {
				var se *StepError
				if err == nil || err.Error() != tt.wantErr || !errors.As(err, &se) {
					t.Fatalf("Run error = %v, want %q as a *StepError", err, tt.wantErr)
				}
			}
			for i, s := range tt.steps {
				if s.runs != tt.wantRuns[i] {
					t.Errorf("step %s ran %d times, want %d", s.name, s.runs, tt.wantRuns[i])
				}
			}
			st, err := LoadState(StatePath(dir))
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, rec := range st.Steps {
				got[rec.Name] = rec.State
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("states = %v, want %v", got, tt.want)
			}
			for _, rec := range st.Steps {
				if rec.State == StateDone && (rec.Ended.IsZero() || rec.Ended.Before(rec.Started)) && rec.Attempts > 0 && tt.prior[rec.Name] == "" {
					t.Errorf("step %s: done without a start and end: %+v", rec.Name, rec)
				}
				if rec.State == StateFailed && rec.Error == "" {
					t.Errorf("step %s failed with no error recorded", rec.Name)
				}
			}
			if tt.wantErr == "" && st.Finished.IsZero() {
				t.Error("a successful run did not record when it finished")
			}
			if len(events) == 0 {
				t.Error("no progress events")
			}
			if Held(LockPath(dir)) {
				t.Error("the lock is still held after Run")
			}
		})
	}
}

func TestRunnerLogsStepTimes(t *testing.T) {
	dir := t.TempDir()
	var logs bytes.Buffer
	clock := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	now := func() time.Time { clock = clock.Add(600 * time.Millisecond); return clock }
	r := &Runner{Dir: dir, Steps: steps(&fakeStep{name: "a"}, &fakeStep{name: "b"}), Now: now}
	if err := r.Run(logctx.With(context.Background(), slog.New(slog.NewTextHandler(&logs, nil)))); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"step a (1/2): done in 600ms"`, `"step b (2/2): done in 600ms"`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, logs.String())
		}
	}
	st, _ := LoadState(StatePath(dir))
	if d := st.Step("a").Duration; d != 600*time.Millisecond {
		t.Errorf("recorded duration %v, want 600ms", d)
	}
}

func TestLoadStateErrors(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "state.json")
	os.WriteFile(p, []byte("{not json"), 0o644)
	if _, err := LoadState(p); err == nil || !strings.Contains(err.Error(), p) {
		t.Errorf("corrupt state: err = %v, want one naming %s", err, p)
	}
	os.WriteFile(p, []byte(`{"version": 99, "steps": []}`), 0o644)
	if _, err := LoadState(p); err == nil || !strings.Contains(err.Error(), "version 99") {
		t.Errorf("future state: err = %v, want a version error", err)
	}
	if st, err := LoadState(filepath.Join(dir, "missing.json")); err != nil || len(st.Steps) != 0 {
		t.Errorf("missing state: %v, %v; want an empty state", st, err)
	}
}

func TestDuplicateStepNames(t *testing.T) {
	r := &Runner{Dir: t.TempDir(), Steps: steps(&fakeStep{name: "a"}, &fakeStep{name: "a"})}
	if err := r.Run(quiet); err == nil || !strings.Contains(err.Error(), `"a"`) {
		t.Errorf("err = %v, want a duplicate-name error", err)
	}
}

// The helper process: a pipeline whose second step announces itself and
// then blocks until the parent kills it.
const helperEnv = "PIPELINE_TEST_HELPER_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(helperEnv); dir != "" {
		os.Exit(helperMain(dir))
	}
	os.Exit(m.Run())
}

func appendLine(path, line string) {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		panic(err)
	}
	fmt.Fprintln(f, line)
	f.Close()
}

func helperSteps(dir string, block string) []Step {
	mk := func(name string) Step {
		return Step{Name: name, Run: func(ctx context.Context, pc *Context) error {
			appendLine(filepath.Join(dir, "runs"), name)
			if name == block {
				os.WriteFile(filepath.Join(dir, "blocking"), nil, 0o644)
				time.Sleep(time.Hour) // until SIGKILL
				return errors.New("not killed")
			}
			return nil
		}}
	}
	return []Step{mk("one"), mk("two"), mk("three")}
}

func helperMain(dir string) int {
	r := &Runner{Dir: filepath.Join(dir, "state"), Steps: helperSteps(dir, os.Getenv("PIPELINE_TEST_BLOCK"))}
	if err := r.Run(quiet); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// startBlockedHelper runs the helper in a child process and waits until it
// is inside the step named block.
func startBlockedHelper(t *testing.T, dir, block string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+dir, "PIPELINE_TEST_BLOCK="+block)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(dir, "blocking")); err == nil {
			return cmd
		}
		if time.Now().After(deadline) {
			t.Fatal("the helper never reached its blocking step")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestResumeAfterSIGKILL(t *testing.T) {
	for _, block := range []string{"one", "two", "three"} {
		t.Run("killed in "+block, func(t *testing.T) {
			dir := t.TempDir()
			cmd := startBlockedHelper(t, dir, block)
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			cmd.Wait()

			st, err := LoadState(filepath.Join(dir, "state", "state.json"))
			if err != nil {
				t.Fatalf("state after SIGKILL: %v", err)
			}
			if got := st.Step(block).State; got != StateRunning {
				t.Fatalf("step %s recorded %q after the kill, want %q", block, got, StateRunning)
			}

			// The second run, in this process, must redo only the killed step and the rest.
			os.Remove(filepath.Join(dir, "runs"))
			r := &Runner{Dir: filepath.Join(dir, "state"), Steps: helperSteps(dir, "")}
			if err := r.Run(quiet); err != nil {
				t.Fatalf("second run: %v", err)
			}
			runs, _ := os.ReadFile(filepath.Join(dir, "runs"))
			want := map[string][]string{"one": {"one", "two", "three"}, "two": {"two", "three"}, "three": {"three"}}[block]
			if got := strings.Fields(string(runs)); strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("second run ran %v, want %v", got, want)
			}
			st, _ = LoadState(filepath.Join(dir, "state", "state.json"))
			if st.Step(block).Attempts != 2 {
				t.Errorf("step %s: %d attempts recorded, want 2", block, st.Step(block).Attempts)
			}

			// A third run does nothing.
			os.Remove(filepath.Join(dir, "runs"))
			if err := r.Run(quiet); err != nil {
				t.Fatalf("third run: %v", err)
			}
			if runs, _ := os.ReadFile(filepath.Join(dir, "runs")); len(runs) != 0 {
				t.Errorf("third run ran %q, want nothing", runs)
			}
		})
	}
}

func TestSecondRunFailsWhileLocked(t *testing.T) {
	dir := t.TempDir()
	cmd := startBlockedHelper(t, dir, "two")
	r := &Runner{Dir: filepath.Join(dir, "state"), Steps: helperSteps(dir, "")}
	start := time.Now()
	err := r.Run(quiet)
	var le *LockedError
	if !errors.As(err, &le) {
		t.Fatalf("second run: err = %v, want a *LockedError", err)
	}
	if le.PID != cmd.Process.Pid || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", cmd.Process.Pid)) {
		t.Errorf("error %q does not name the holder pid %d", err, cmd.Process.Pid)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("second run waited %v for the lock; it must fail at once", time.Since(start))
	}
	// The state still shows the first run's step as running.
	data, _ := os.ReadFile(filepath.Join(dir, "state", "state.json"))
	var st State
	if err := json.Unmarshal(data, &st); err != nil || st.Step("two").State != StateRunning {
		t.Errorf("state changed under the running holder: %s", data)
	}
}

// recordingDoner remembers the record state Done was shown.
type recordingDoner struct {
	fakeStep
	seen []string
}

func (s *recordingDoner) Done(ctx context.Context, pc *Context) (bool, error) {
	s.seen = append(s.seen, pc.Record.State)
	return false, nil
}

// TestDoneSeesTheRecord: a Done check can tell a step recorded done (and
// refuse to redo it on a doubt) from one that never finished.
func TestDoneSeesTheRecord(t *testing.T) {
	dir := t.TempDir()
	s := &recordingDoner{fakeStep: fakeStep{name: "init"}}
	r := &Runner{Dir: dir, Steps: []Step{{Name: s.name, Run: s.run, Done: s.Done}}}
	for i := 0; i < 2; i++ {
		if err := r.Run(quiet); err != nil {
			t.Fatal(err)
		}
	}
	// First run: never recorded, checked as it starts (running). Second:
	// recorded done, checked before deciding to redo it, then again as the
	// redo starts.
	want := []string{StateRunning, StateDone, StateRunning}
	if strings.Join(s.seen, ",") != strings.Join(want, ",") {
		t.Fatalf("Done saw record states %v, want %v", s.seen, want)
	}
}

// slowCluster finishes once; afterwards its Done check fails while the
// work "does not answer", as a control plane slow to start after a
// reboot does, and it never runs again once completed.
type slowCluster struct {
	fakeStep
	answering bool
	runs      int
	completed []bool // what each Done call saw
}

func (s *slowCluster) Run(ctx context.Context, pc *Context) error { s.runs++; return nil }

func (s *slowCluster) step() Step { return Step{Name: s.name, Run: s.Run, Done: s.Done} }

func (s *slowCluster) Done(ctx context.Context, pc *Context) (bool, error) {
	once := !pc.Record.Completed.IsZero()
	s.completed = append(s.completed, once)
	if !once {
		return false, nil
	}
	if !s.answering {
		return false, errors.New("does not answer yet")
	}
	return true, nil
}

// TestCompletedSurvivesAFailedCheck: after a step finished, a run whose
// Done check fails records the failure, and the next run's Done still
// knows the step finished once (so it waits instead of redoing it).
func TestCompletedSurvivesAFailedCheck(t *testing.T) {
	dir := t.TempDir()
	s := &slowCluster{fakeStep: fakeStep{name: "kubeadm-init"}}
	r := &Runner{Dir: dir, Steps: []Step{s.step()}}
	if err := r.Run(quiet); err != nil {
		t.Fatal(err)
	}
	if err := r.Run(quiet); err == nil {
		t.Fatal("the run whose check failed succeeded")
	}
	st, err := LoadState(StatePath(dir))
	if err != nil {
		t.Fatal(err)
	}
	if rec := st.Step("kubeadm-init"); rec.State != StateFailed || rec.Completed.IsZero() {
		t.Fatalf("after the failed check: %+v, want failed with Completed kept", rec)
	}
	if err := r.Run(quiet); err == nil {
		t.Fatal("the third run (still not answering) succeeded")
	}
	s.answering = true
	if err := r.Run(quiet); err != nil {
		t.Fatal(err)
	}
	if s.runs != 1 {
		t.Errorf("the step ran %d times, want once", s.runs)
	}
	if want := []bool{false, true, true, true}; fmt.Sprint(s.completed) != fmt.Sprint(want) {
		t.Errorf("Done saw Completed %v, want %v", s.completed, want)
	}
}
