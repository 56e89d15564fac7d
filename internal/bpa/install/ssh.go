package install

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/ssh"
)

// DialTimeout bounds connecting and the SSH handshake.
var DialTimeout = 20 * time.Second

// ServerAliveInterval and ServerAliveCountMax are OpenSSH's client
// options of those names, with its usual settings: while connected, the
// BPA asks the host's sshd every interval whether it is there, and closes
// the connection when that many asks in a row go unanswered. A host
// powered off or cut from the network in the middle of a command sends
// no reset, so without them the command would wait for ever and hold the
// BPA's install of every other host.
var (
	ServerAliveInterval = 15 * time.Second
	ServerAliveCountMax = 3
)

// HostKeyError is a host that showed another host key than the one
// firstboot gave it: it is never trusted.
type HostKeyError struct {
	Address   string
	Want, Got string // fingerprints
}

func (e *HostKeyError) Error() string {
	return fmt.Sprintf("%s showed host key %s, not %s that firstboot gave it: refused (a different machine answers at this address, or the host was not installed from this site)",
		e.Address, e.Got, e.Want)
}

// UnreachableError is a host the BPA could not connect to.
type UnreachableError struct {
	Address string
	Err     error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("cannot reach %s over SSH: %v", e.Address, e.Err)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// Client is an SSH connection to one host, as root.
type Client struct {
	Address string
	c       *ssh.Client
	// done ends the keepalives; silent is set when they closed the
	// connection.
	done      chan struct{}
	closeOnce sync.Once
	silent    atomic.Bool
}

// Dial connects to addr (host:port) as root with key, accepting only
// hostKey.
func Dial(ctx context.Context, addr string, key ssh.Signer, hostKey ssh.PublicKey) (*Client, error) {
	want := ssh.FingerprintSHA256(hostKey)
	cfg := &ssh.ClientConfig{
		User: "root",
		Auth: []ssh.AuthMethod{ssh.PublicKeys(key)},
		HostKeyCallback: func(_ string, _ net.Addr, got ssh.PublicKey) error {
			if !bytes.Equal(got.Marshal(), hostKey.Marshal()) {
				return &HostKeyError{Address: addr, Want: want, Got: ssh.FingerprintSHA256(got)}
			}
			return nil
		},
		// Ask for the pinned key's type only: the host has that key.
		HostKeyAlgorithms: []string{hostKey.Type()},
		Timeout:           DialTimeout,
	}
	dctx, cancel := context.WithTimeout(ctx, DialTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(dctx, "tcp", addr)
	if err != nil {
		return nil, &UnreachableError{Address: addr, Err: err}
	}
	_ = conn.SetDeadline(time.Now().Add(DialTimeout))
	sc, chans, reqs, err := ssh.NewClientConn(conn, addr, cfg)
	if err != nil {
		conn.Close()
		var hk *HostKeyError
		if errors.As(err, &hk) {
			return nil, hk
		}
		return nil, &UnreachableError{Address: addr, Err: err}
	}
	_ = conn.SetDeadline(time.Time{})
	c := &Client{Address: addr, c: ssh.NewClient(sc, chans, reqs), done: make(chan struct{})}
	go c.keepAlive(ServerAliveInterval, ServerAliveCountMax)
	return c, nil
}

// keepAlive sends OpenSSH's keepalive request every interval (one at a
// time) and closes the connection when max intervals in a row pass with
// one unanswered. Any answer counts, a refusal too: the host is there.
func (c *Client) keepAlive(interval time.Duration, max int) {
	t := time.NewTicker(interval)
	defer t.Stop()
	answered := make(chan error, 1)
	pending, missed := false, 0
	for {
		select {
		case <-c.done:
			return
		case err := <-answered:
			if err != nil {
				return // the connection is gone
			}
			pending, missed = false, 0
		case <-t.C:
			if !pending {
				pending = true
				go func() {
					_, _, err := c.c.SendRequest("keepalive@openssh.com", true, nil)
					answered <- err
				}()
				continue
			}
			if missed++; missed >= max {
				c.silent.Store(true)
				c.c.Close()
				return
			}
		}
	}
}

// Close closes the connection.
func (c *Client) Close() error {
	c.closeOnce.Do(func() { close(c.done) })
	return c.c.Close()
}

// lost is the error of a session that failed on the connection.
func (c *Client) lost(err error) error {
	if c.silent.Load() {
		err = fmt.Errorf("the host stopped answering: %d keepalives %v apart went unanswered, and the connection was closed", ServerAliveCountMax, ServerAliveInterval)
	}
	return &UnreachableError{Address: c.Address, Err: err}
}

// Run runs script with bash on the host and returns its standard output.
// The script goes through standard input, never on a command line. On
// failure the error holds the last lines of standard error with every
// secret given (and anything shaped like a bootstrap token) masked.
func (c *Client) Run(ctx context.Context, what, script string, secrets ...string) ([]byte, error) {
	s, err := c.c.NewSession()
	if err != nil {
		return nil, c.lost(err)
	}
	defer s.Close()
	var stdout, stderr bytes.Buffer
	s.Stdin = strings.NewReader(wholeScript(script))
	s.Stdout, s.Stderr = &stdout, &stderr
	done := make(chan error, 1)
	go func() { done <- s.Run("bash -euo pipefail -s") }()
	select {
	case err = <-done:
	case <-ctx.Done():
		_ = s.Signal(ssh.SIGTERM)
		s.Close()
		return nil, ctx.Err()
	}
	if err != nil {
		var exit *ssh.ExitError
		if !errors.As(err, &exit) {
			return nil, c.lost(err)
		}
		msg := Redact(tail(stderr.String(), 6), secrets...)
		if msg == "" {
			msg = Redact(tail(stdout.String(), 6), secrets...)
		}
		return nil, fmt.Errorf("%s on %s failed (exit status %d): %s", what, c.Address, exit.ExitStatus(), msg)
	}
	return stdout.Bytes(), nil
}

// wholeScript makes script one brace group. bash runs what it reads from
// standard input as it reads it, so a stream cut in the middle would run
// the half that came; a group runs only once bash has read all of it, and
// a cut one is a syntax error that runs nothing.
func wholeScript(script string) string {
	return "{\n" + strings.TrimRight(script, "\n") + "\n}\n"
}

// tokenShape is a kubeadm bootstrap token, certificate key or CA hash.
var tokenShape = regexp.MustCompile(`\b[a-z0-9]{6}\.[a-z0-9]{16}\b|\b[0-9a-f]{64}\b`)

// Redact masks each secret, and anything shaped like a bootstrap token or
// a certificate key, in s.
func Redact(s string, secrets ...string) string {
	for _, sec := range secrets {
		if sec != "" {
			s = strings.ReplaceAll(s, sec, "[redacted]")
		}
	}
	return tokenShape.ReplaceAllString(s, "[redacted]")
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
