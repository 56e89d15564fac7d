package pipeline

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/bootstick/bootstick/internal/atomicfile"
)

// StateVersion is the version of the state file format.
const StateVersion = 1

// Step states as recorded in the state file.
const (
	StatePending = "pending"
	StateRunning = "running" // started and not finished: interrupted if no run holds the lock
	StateDone    = "done"
	StateFailed  = "failed"
)

// State is the content of the state file: one record per step, in the
// order of the last run.
type State struct {
	Version  int          `json:"version"`
	Started  time.Time    `json:"started,omitzero"`  // the last run's start
	Finished time.Time    `json:"finished,omitzero"` // when every step was last done
	Steps    []StepRecord `json:"steps"`
}

// StepRecord is what the runner knows about one step.
type StepRecord struct {
	Name     string        `json:"name"`
	State    string        `json:"state"`
	Started  time.Time     `json:"started,omitzero"`
	Ended    time.Time     `json:"ended,omitzero"`
	Duration time.Duration `json:"durationNanos,omitempty"`
	Attempts int           `json:"attempts,omitempty"`
	// Error is the last error of the step; it stays after a later success
	// would be misleading, so a success clears it.
	Error string `json:"error,omitempty"`
	// Hint is the failed step's advice to a person (Step.Hint).
	Hint string `json:"hint,omitempty"`
	// Skipped is set when the step was found done by its own check
	// without running.
	Skipped bool `json:"skipped,omitempty"`
	// Completed is when the step last finished. A later failure or re-run
	// keeps it: a Done check can tell work that once finished (a cluster
	// that is slow to answer) from work that never did.
	Completed time.Time `json:"completed,omitzero"`
}

// Step returns the record of the named step, or nil.
func (s *State) Step(name string) *StepRecord {
	for i := range s.Steps {
		if s.Steps[i].Name == name {
			return &s.Steps[i]
		}
	}
	return nil
}

// LastError returns the most recently ended step that failed, or nil.
func (s *State) LastError() *StepRecord {
	var last *StepRecord
	for i := range s.Steps {
		r := &s.Steps[i]
		if r.Error != "" && r.State != StateDone && (last == nil || r.Ended.After(last.Ended)) {
			last = r
		}
	}
	return last
}

// LoadState reads a state file. A missing file is an empty state.
func LoadState(path string) (*State, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &State{Version: StateVersion}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading state %s: %w", path, err)
	}
	var s State
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("reading state %s: %w (move it away to start over)", path, err)
	}
	if s.Version != StateVersion {
		return nil, fmt.Errorf("reading state %s: version %d, this firstboot reads version %d", path, s.Version, StateVersion)
	}
	return &s, nil
}

// SaveState writes the state file atomically.
func SaveState(path string, s *State) error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding state: %w", err)
	}
	// A step may have mounted a fresh file system over the folder.
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("writing state: %w", err)
	}
	return atomicfile.Write(path, append(data, '\n'), 0o600)
}
