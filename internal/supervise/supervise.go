// Package supervise keeps long-lived services (the registry, containerd,
// kubelet) running after the command that started them exits. With
// systemd as PID 1 each service is a transient unit started through
// systemd's D-Bus API; without it, each runs under a small detached
// supervisor process that restarts it when it exits.
package supervise

import (
	"context"
	"fmt"
	"os"
	"regexp"
)

// Service is one long-lived process.
type Service struct {
	// Name is the unit name without ".service", e.g. "bootstick-registry".
	Name        string
	Description string
	// Command is the absolute path of the program and its arguments.
	Command []string
	// Env is extra KEY=VALUE environment.
	Env []string
}

var nameRE = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]*$`)

func (s Service) validate() error {
	if !nameRE.MatchString(s.Name) {
		return fmt.Errorf("service name %q: use letters, digits, '-', '_' and '.'", s.Name)
	}
	if len(s.Command) == 0 || len(s.Command[0]) == 0 || s.Command[0][0] != '/' {
		return fmt.Errorf("service %s: the command must start with an absolute path", s.Name)
	}
	return nil
}

// Manager starts and stops services.
type Manager interface {
	// Start starts the service unless it is already running.
	Start(ctx context.Context, s Service) error
	// Stop stops it and waits for it to exit; a service not running is not an error.
	Stop(ctx context.Context, name string) error
	// Active reports whether it is running.
	Active(ctx context.Context, name string) (bool, error)
	// Kind is "systemd" or "process".
	Kind() string
}

// SystemdIsPID1 reports whether systemd manages this machine (the
// sd_booted test: /run/systemd/system exists).
func SystemdIsPID1() bool {
	fi, err := os.Lstat("/run/systemd/system")
	return err == nil && fi.IsDir()
}

// New returns the systemd manager when systemd is PID 1, else a process
// manager keeping its pid files and logs in runDir and starting each
// supervisor with supervisorCmd (e.g. {"/usr/bin/firstboot", "supervise"}).
func New(runDir string, supervisorCmd []string) Manager {
	if SystemdIsPID1() {
		return &Systemd{}
	}
	return &Process{Dir: runDir, SupervisorCommand: supervisorCmd}
}
