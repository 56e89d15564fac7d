// Package command is bootstick's one way to run a program: its whole
// output goes to a log file only root can read, and a failure's error
// carries a short tail of it with secrets (bootstrap tokens, certificate
// keys, private keys) taken out.
package command

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// Options say where a command's output goes.
type Options struct {
	// Log is the file the whole output is appended to (0600; its folder is
	// made 0700). Empty keeps the output in memory only.
	Log string
	// Env is the environment; nil inherits ours.
	Env []string
	// Dir is the working folder.
	Dir string
	// Stdin is the standard input; nil is none.
	Stdin io.Reader
	// Tail is how many lines of output an error carries; default 15.
	Tail int
}

// Error is a failed command: what ran, how it ended, and the redacted tail
// of its output.
type Error struct {
	Command string
	Err     error
	Tail    string
	Log     string
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("%s: %v", e.Command, e.Err)
	if e.Tail != "" {
		msg += "\n" + e.Tail
	}
	if e.Log != "" {
		msg += "\n(whole output: " + e.Log + ")"
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// Run runs argv and returns its combined output. The child dies with us
// (killed or not), so a resumed run never races an orphan.
func Run(ctx context.Context, o Options, argv ...string) ([]byte, error) {
	return run(ctx, o, nil, argv)
}

// Output runs argv and returns its standard output alone; standard error
// goes to the log and, on failure, into the error's tail. An *Error
// unwraps to the *exec.ExitError, so callers can read the exit code.
func Output(ctx context.Context, o Options, argv ...string) ([]byte, error) {
	var stdout bytes.Buffer
	_, err := run(ctx, o, &stdout, argv)
	return stdout.Bytes(), err
}

func run(ctx context.Context, o Options, stdout *bytes.Buffer, argv []string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env, cmd.Dir, cmd.Stdin = o.Env, o.Dir, o.Stdin
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var out bytes.Buffer
	w := io.Writer(&out)
	if o.Log != "" {
		if err := os.MkdirAll(filepath.Dir(o.Log), 0o700); err != nil {
			return nil, fmt.Errorf("opening the log of %s: %w", argv[0], err)
		}
		f, err := os.OpenFile(o.Log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return nil, fmt.Errorf("opening the log of %s: %w", argv[0], err)
		}
		defer f.Close()
		fmt.Fprintf(f, "=== %s: %s\n", time.Now().UTC().Format(time.RFC3339), strings.Join(argv, " "))
		w = io.MultiWriter(&out, f)
	}
	cmd.Stdout, cmd.Stderr = w, w
	if stdout != nil {
		cmd.Stdout = io.MultiWriter(stdout, w)
	}
	err := cmd.Run()
	if err == nil {
		return out.Bytes(), nil
	}
	if ctx.Err() != nil {
		err = ctx.Err()
	}
	n := o.Tail
	if n == 0 {
		n = 15
	}
	return out.Bytes(), &Error{Command: Redact(strings.Join(argv, " ")), Err: err, Tail: Tail(Redact(out.String()), n), Log: o.Log}
}

// Tail keeps the last n non-empty lines of s, each indented.
func Tail(s string, n int) string {
	var keep []string
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != "" {
			keep = append(keep, "  "+strings.TrimRight(l, "\r"))
		}
	}
	if len(keep) > n {
		keep = append([]string{"  ..."}, keep[len(keep)-n:]...)
	}
	return strings.Join(keep, "\n")
}

var secrets = []*regexp.Regexp{
	// kubeadm bootstrap tokens: [a-z0-9]{6}.[a-z0-9]{16}
	regexp.MustCompile(`\b[a-z0-9]{6}\.[a-z0-9]{16}\b`),
	// kubeadm's certificate key (--certificate-key, upload-certs output)
	regexp.MustCompile(`(?i)(certificate[- ]key:?[= ]*)[0-9a-f]{64}`),
	// PEM private keys
	regexp.MustCompile(`(?s)-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(-----END [A-Z ]*PRIVATE KEY-----|$)`),
}

// Redact replaces bootstrap tokens, certificate keys and private keys in s.
func Redact(s string) string {
	for i, re := range secrets {
		if i == 1 {
			s = re.ReplaceAllString(s, "${1}[redacted]")
			continue
		}
		s = re.ReplaceAllString(s, "[redacted]")
	}
	return s
}
