package pipeline

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/bootstick/bootstick/internal/flock"
)

// Lock is an exclusive flock on a file that also holds the owner's PID.
type Lock struct {
	l    *flock.Lock
	path string
}

// LockedError is returned when another process holds the lock.
type LockedError struct {
	Path string
	PID  int // 0 when unknown
}

func (e *LockedError) Error() string {
	if e.PID > 0 {
		return fmt.Sprintf("another firstboot run is in progress (pid %d holds %s); wait for it, or stop it first", e.PID, e.Path)
	}
	return fmt.Sprintf("another firstboot run is in progress (it holds %s); wait for it, or stop it first", e.Path)
}

// AcquireLock takes the lock at path without waiting: when another process
// holds it, the error is a *LockedError naming that process.
func AcquireLock(path string) (*Lock, error) {
	l, err := flock.Try(path)
	if errors.Is(err, flock.ErrLocked) {
		return nil, &LockedError{Path: path, PID: LockHolder(path)}
	}
	if err != nil {
		return nil, err
	}
	f := l.File()
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
		if err == nil {
			err = f.Sync()
		}
		if err != nil {
			l.Release()
			return nil, fmt.Errorf("writing lock %s: %w", path, err)
		}
	}
	return &Lock{l: l, path: path}, nil
}

// LockHolder returns the PID written in the lock file, or 0.
func LockHolder(path string) int {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return 0
	}
	return pid
}

// Held reports whether some process holds the lock at path right now.
func Held(path string) bool { return flock.Held(path) }

// Release drops the lock. The file stays; its PID is cleared.
func (l *Lock) Release() error {
	if l == nil || l.l == nil {
		return nil
	}
	l.l.File().Truncate(0)
	err := l.l.Release()
	l.l = nil
	if err != nil {
		return fmt.Errorf("releasing lock %s: %w", l.path, err)
	}
	return nil
}
