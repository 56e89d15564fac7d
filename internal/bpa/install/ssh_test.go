package install

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/bootstick/bootstick/internal/sshkeys"
	"github.com/bootstick/bootstick/internal/sshtest"
	"github.com/bootstick/bootstick/internal/testctx"
)

// cutter forwards TCP connections to a server until Cut, after which it
// forwards nothing more and closes nothing: a host powered off or cut
// from the network, which sends no reset.
type cutter struct {
	addr string
	cut  chan struct{}
	once sync.Once
}

func newCutter(t *testing.T, to string) *cutter {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &cutter{addr: l.Addr().String(), cut: make(chan struct{})}
	var conns []net.Conn
	var mu sync.Mutex
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, cn := range conns {
			cn.Close()
		}
	})
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", to)
			if err != nil {
				in.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, in, out)
			mu.Unlock()
			go c.pipe(out, in)
			go c.pipe(in, out)
		}
	}()
	return c
}

// pipe copies src to dst until the cut; what it reads after is dropped.
func (c *cutter) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		select {
		case <-c.cut:
			if err != nil {
				return // closes nothing: the other side hears nothing
			}
			continue // swallowed: nothing more reaches the other side
		default:
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (c *cutter) Cut() { c.once.Do(func() { close(c.cut) }) }

func testSigner(t *testing.T) ssh.Signer {
	t.Helper()
	key, err := sshkeys.Generate(nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.ParsePrivateKey(key.Private)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// setServerAlive shortens the keepalives for a test.
func setServerAlive(t *testing.T, interval time.Duration, max int) {
	t.Helper()
	oldI, oldM := ServerAliveInterval, ServerAliveCountMax
	ServerAliveInterval, ServerAliveCountMax = interval, max
	t.Cleanup(func() { ServerAliveInterval, ServerAliveCountMax = oldI, oldM })
}

// TestSilentHostFailsTheCommand: a host that stops answering in the
// middle of a command (its network cut, no reset ever sent) fails that
// command as unreachable, with the keepalives named as the reason,
// instead of holding the BPA for ever.
func TestSilentHostFailsTheCommand(t *testing.T) {
	setServerAlive(t, 200*time.Millisecond, 3)
	ctx, cancel := testctx.New(t, time.Minute)
	defer cancel()
	key := testSigner(t)
	started := make(chan struct{})
	release := make(chan struct{})
	defer close(release)
	srv := sshtest.Start(t, key.PublicKey(), func(cmd, stdin string) (string, string, uint32) {
		close(started)
		<-release // kubeadm, still running when the host goes silent
		return "", "", 0
	})
	cut := newCutter(t, srv.Addr)
	c, err := Dial(ctx, cut.addr, key, srv.HostKey)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	done := make(chan error, 1)
	go func() {
		_, err := c.Run(ctx, "kubeadm init", "kubeadm init")
		done <- err
	}()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("the command ended before the host went silent: %v", err)
	case <-ctx.Done():
		t.Fatal("the command never reached the host")
	}
	cut.Cut()
	select {
	case err = <-done:
	case <-ctx.Done():
		t.Fatal("the command still waits on a host that stopped answering")
	}
	var unreachable *UnreachableError
	if !errors.As(err, &unreachable) || !strings.Contains(err.Error(), "stopped answering: 3 keepalives") {
		t.Errorf("the command on a silent host: %v, want unreachable, the keepalives named", err)
	}
}

// TestKeepalivesSpareALongCommand: a command that runs through many
// keepalive intervals on a host that answers them is not cut.
func TestKeepalivesSpareALongCommand(t *testing.T) {
	// Cut only after a second unanswered: an answer late on a loaded
	// machine must not fail this test.
	setServerAlive(t, 50*time.Millisecond, 20)
	ctx, cancel := testctx.New(t, time.Minute)
	defer cancel()
	key := testSigner(t)
	var srv *sshtest.Server
	ready := make(chan struct{})
	srv = sshtest.Start(t, key.PublicKey(), func(cmd, stdin string) (string, string, uint32) {
		<-ready
		// Runs through forty keepalives, twice what would cut it if they
		// went unanswered.
		for range 40 {
			<-srv.Keepalives()
		}
		return "joined\n", "", 0
	})
	close(ready)
	c, err := Dial(ctx, srv.Addr, key, srv.HostKey)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	out, err := c.Run(ctx, "kubeadm join", "kubeadm join")
	if err != nil || string(out) != "joined\n" {
		t.Errorf("a long command on an answering host: %q %v", out, err)
	}
}

// TestCutStreamRunsNothing: a script whose stream is cut anywhere runs
// nothing of it; whole, it runs all of it. (Without the group, bash runs
// the lines that came.)
func TestCutStreamRunsNothing(t *testing.T) {
	dir := t.TempDir()
	script := "touch " + dir + "/first\ncat >" + dir + "/conf <<'END'\na: 1\nEND\ntouch " + dir + "/last\n"
	whole := wholeScript(script)
	// Cut anywhere before the group's closing brace (after it, the whole
	// script came).
	for cut := 1; cut < strings.LastIndex(whole, "}"); cut++ {
		c := exec.Command("bash", "-euo", "pipefail", "-s")
		c.Stdin = strings.NewReader(whole[:cut])
		out, err := c.CombinedOutput()
		if err == nil {
			t.Errorf("cut after %d bytes: bash ran it: %s", cut, out)
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Fatalf("cut after %d bytes (%q): %d files made, want none", cut, whole[:cut], len(ents))
		}
	}
	c := exec.Command("bash", "-euo", "pipefail", "-s")
	c.Stdin = strings.NewReader(whole)
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("the whole script: %v\n%s", err, out)
	}
	for _, f := range []string{"first", "conf", "last"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("the whole script did not make %s", f)
		}
	}
	// The hazard itself: bash runs the lines of a cut stream that came.
	os.Remove(filepath.Join(dir, "first"))
	c = exec.Command("bash", "-euo", "pipefail", "-s")
	c.Stdin = strings.NewReader(script[:strings.Index(script, "cat")])
	c.Run()
	if _, err := os.Stat(filepath.Join(dir, "first")); err != nil {
		t.Errorf("a cut stream without the group ran nothing either; the test proves nothing")
	}
}
