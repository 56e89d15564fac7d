package pipeline

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// Lock is an exclusive flock on a file that also holds the owner's PID.
type Lock struct {
	f    *os.File
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
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, &LockedError{Path: path, PID: LockHolder(path)}
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
		if err == nil {
			err = f.Sync()
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("writing lock %s: %w", path, err)
		}
	}
	return &Lock{f: f, path: path}, nil
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
func Held(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		return errors.Is(err, syscall.EWOULDBLOCK)
	}
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false
}

// Release drops the lock. The file stays; its PID is cleared.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	l.f.Truncate(0)
	err := l.f.Close() // closing drops the flock
	l.f = nil
	if err != nil {
		return fmt.Errorf("releasing lock %s: %w", l.path, err)
	}
	return nil
}
