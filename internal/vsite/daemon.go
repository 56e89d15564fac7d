package vsite

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/bootstick/bootstick/internal/command"
)

// daemon is a long-running program of the site, in a process group of its
// own, its output in a log file.
type daemon struct {
	name string
	log  string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

func startDaemon(name, log string, env []string, argv ...string) (*daemon, error) {
	f, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	defer f.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	d := &daemon{name: name, log: log, cmd: cmd, done: make(chan struct{})}
	go func() { d.err = cmd.Wait(); close(d.done) }()
	return d, nil
}

// wait polls ready until it holds, the daemon exits, or timeout.
func (d *daemon) wait(ctx context.Context, timeout time.Duration, ready func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for !ready() {
		select {
		case <-d.done:
			return fmt.Errorf("%s exited: %v\n%s", d.name, d.err, d.tail())
		case <-ctx.Done():
			return fmt.Errorf("%s did not come up in %v\n%s", d.name, timeout, d.tail())
		case <-tick.C:
		}
	}
	return nil
}

func (d *daemon) tail() string {
	data, _ := os.ReadFile(d.log)
	return command.Tail(string(data), 15)
}

// stop ends the daemon's process group: TERM, then KILL after 10 s.
func (d *daemon) stop() error {
	select {
	case <-d.done:
		return nil
	default:
	}
	syscall.Kill(-d.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-d.done:
		return nil
	case <-time.After(10 * time.Second):
	}
	syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
	<-d.done
	return errors.New(d.name + " did not stop on SIGTERM; killed")
}

func lookPath(p string) (string, error) {
	if p == "libvirtd" {
		if _, err := os.Stat("/usr/sbin/libvirtd"); err == nil {
			return "/usr/sbin/libvirtd", nil
		}
	}
	return exec.LookPath(p)
}
