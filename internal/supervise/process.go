package supervise

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bootstick/bootstick/internal/logctx"

	"github.com/bootstick/bootstick/internal/flock"
)

// Process runs each service under a detached supervisor process (its own
// session, so it outlives the command that started it). The supervisor
// restarts the service when it exits and stops it on SIGTERM; if the
// supervisor is killed, the kernel kills the service too (PDEATHSIG).
type Process struct {
	// Dir holds NAME.pid (the supervisor's pid), NAME.child.pid (the
	// service's pid and start time) and NAME.log.
	Dir string
	// SupervisorCommand runs RunSupervisor, e.g. {"/usr/bin/firstboot",
	// "supervise"}; the manager appends "--dir D --name N -- COMMAND...".
	SupervisorCommand []string
	// Env is added to the supervisor's environment (tests use it).
	Env []string
}

func (*Process) Kind() string { return "process" }

func (m *Process) pidFile(name string) string   { return filepath.Join(m.Dir, name+".pid") }
func (m *Process) childFile(name string) string { return filepath.Join(m.Dir, name+".child.pid") }

// LogFile is where the service's output goes.
func (m *Process) LogFile(name string) string { return filepath.Join(m.Dir, name+".log") }

func (m *Process) Start(ctx context.Context, s Service) error {
	if err := s.validate(); err != nil {
		return err
	}
	if len(m.SupervisorCommand) == 0 {
		return errors.New("supervise: no supervisor command")
	}
	if pid := supervisorPID(m.pidFile(s.Name), s.Name); pid > 0 {
		return nil
	}
	if err := os.MkdirAll(m.Dir, 0o755); err != nil {
		return fmt.Errorf("starting %s: %w", s.Name, err)
	}
	logf, err := os.OpenFile(m.LogFile(s.Name), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return fmt.Errorf("starting %s: %w", s.Name, err)
	}
	defer logf.Close()
	args := append(append([]string{}, m.SupervisorCommand[1:]...), "--dir", m.Dir, "--name", s.Name, "--")
	args = append(args, s.Command...)
	cmd := exec.Command(m.SupervisorCommand[0], args...)
	cmd.Env = append(append(os.Environ(), m.Env...), s.Env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", s.Name, err)
	}
	// Reap it if it dies while we are still here; otherwise it is adopted.
	go cmd.Wait()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		// Ours, or one that was already starting and holds the service's
		// lock (ours then leaves at once).
		if supervisorPID(m.pidFile(s.Name), s.Name) > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("starting %s: the supervisor did not come up (see %s)", s.Name, m.LogFile(s.Name))
		case <-tick.C:
		}
	}
}

func (m *Process) Stop(ctx context.Context, name string) error {
	pid := supervisorPID(m.pidFile(name), name)
	if pid == 0 {
		// No supervisor: make sure no orphaned child is left.
		if c := liveChild(m.childFile(name)); c > 0 {
			syscall.Kill(c, syscall.SIGKILL)
		}
		os.Remove(m.pidFile(name))
		os.Remove(m.childFile(name))
		return nil
	}
	syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(30 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	os.Remove(m.pidFile(name))
	return nil
}

func (m *Process) Active(ctx context.Context, name string) (bool, error) {
	return supervisorPID(m.pidFile(name), name) > 0, nil
}

// ChildPID returns the pid of the service process itself, or 0.
func (m *Process) ChildPID(name string) int {
	if supervisorPID(m.pidFile(name), name) == 0 {
		return 0
	}
	return liveChild(m.childFile(name))
}

// readPID reads a pid file's pid (its first field).
func readPID(path string) int {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return 0
	}
	pid, _ := strconv.Atoi(f[0])
	return pid
}

// liveChild returns the service process of a child file ("PID START"),
// if it still runs: a live process of that pid that started at START
// (startTime). Pids are reused (32768 of them go round in an hour of
// tests), and a process that merely holds the pid now is never the
// service; neither is one of a child file without START.
func liveChild(path string) int {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	f := strings.Fields(string(data))
	if len(f) != 2 {
		return 0
	}
	pid, err := strconv.Atoi(f[0])
	if err != nil || pid <= 0 || !alive(pid) {
		return 0
	}
	if start, ok := startTime(pid); !ok || strconv.FormatUint(start, 10) != f[1] {
		return 0
	}
	return pid
}

// startTime is when process pid started, in clock ticks after boot
// (/proc/PID/stat's 22nd field): with the pid, it names one process.
func startTime(pid int) (uint64, bool) {
	f, err := statFields(pid)
	if err != nil || len(f) < 20 {
		return 0, false
	}
	v, err := strconv.ParseUint(f[19], 10, 64)
	return v, err == nil
}

// statFields are /proc/PID/stat's fields after "pid (comm)", from the
// 3rd (state) on; none when the line has no comm.
func statFields(pid int) ([]string, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return nil, nil
	}
	return strings.Fields(string(data[i+1:])), nil
}

// writeChild records the service process: its pid and start time.
func writeChild(path string, pid int) error {
	start, ok := startTime(pid)
	if !ok {
		return fmt.Errorf("reading process %d's start time", pid)
	}
	return writeFile(path, fmt.Sprintf("%d %d\n", pid, start))
}

func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	// A zombie is not alive.
	f, err := statFields(pid)
	if err != nil {
		return false
	}
	return len(f) == 0 || f[0] != "Z"
}

func cmdlineOf(pid int) string {
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.ReplaceAll(string(data), "\x00", " ")
}

// supervisorPID returns the live supervisor for name, guarding against a
// recycled pid by checking its command line.
func supervisorPID(pidFile, name string) int {
	pid := readPID(pidFile)
	if pid <= 0 || !alive(pid) {
		return 0
	}
	if !strings.Contains(cmdlineOf(pid), "--name "+name+" ") {
		return 0
	}
	return pid
}

func writePID(path string, pid int) error {
	return writeFile(path, strconv.Itoa(pid)+"\n")
}

// writeFile replaces path with data whole.
func writeFile(path, data string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// RunSupervisor is the supervisor process's body: it runs command, restarts
// it with a growing delay whenever it exits, and on SIGTERM or SIGINT stops
// it (SIGTERM, then SIGKILL after grace) and returns.
func RunSupervisor(ctx context.Context, dir, name string, command []string) error {
	log := logctx.From(ctx)
	if len(command) == 0 {
		return errors.New("supervise: no command")
	}
	// PDEATHSIG is per thread: keep this goroutine on one thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	// One supervisor per service: it holds NAME.lock for its whole life. A
	// second one (started by a run that did not yet see the first's pid
	// file, e.g. after the first run was killed) leaves at once instead of
	// overwriting the pid file and orphaning the first.
	lock, err := flock.Try(filepath.Join(dir, name+".lock"))
	if errors.Is(err, flock.ErrLocked) {
		log.Info("already supervised by another process; leaving", "service", name)
		return nil
	}
	if err != nil {
		return fmt.Errorf("supervise %s: %w", name, err)
	}
	defer lock.Release()

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	if err := writePID(filepath.Join(dir, name+".pid"), os.Getpid()); err != nil {
		return fmt.Errorf("supervise %s: %w", name, err)
	}
	defer os.Remove(filepath.Join(dir, name+".pid"))
	defer os.Remove(filepath.Join(dir, name+".child.pid"))

	const grace = 20 * time.Second
	delay := time.Second
	for {
		cmd := exec.Command(command[0], command[1:]...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		started := time.Now()
		if err := cmd.Start(); err != nil {
			log.Error("starting service", "service", name, "err", err)
		} else {
			if err := writeChild(filepath.Join(dir, name+".child.pid"), cmd.Process.Pid); err != nil {
				log.Warn("recording the service's process", "service", name, "err", err)
			}
			log.Info("service started", "service", name, "pid", cmd.Process.Pid)
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				log.Warn("service exited; restarting", "service", name, "err", err, "after", delay)
			case sig := <-sigs:
				log.Info("stopping service", "service", name, "signal", sig.String())
				cmd.Process.Signal(syscall.SIGTERM)
				select {
				case <-done:
				case <-time.After(grace):
					cmd.Process.Kill()
					<-done
				}
				return nil
			}
		}
		if time.Since(started) > time.Minute {
			delay = time.Second
		}
		select {
		case <-time.After(delay):
		case <-sigs:
			return nil
		}
		delay = min(2*delay, 10*time.Second)
	}
}
