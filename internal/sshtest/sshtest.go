// Package sshtest is an SSH server for tests: it accepts one client key,
// shows a host key of its own, and answers each command with a handler
// instead of running it.
package sshtest

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/crypto/ssh"
)

// Handler answers one session: the command and its standard input.
type Handler func(command, stdin string) (stdout, stderr string, status uint32)

// Server listens on loopback until the test ends.
type Server struct {
	Addr    string
	HostKey ssh.PublicKey

	mu         sync.Mutex
	commands   []string
	keepalives chan struct{}
	open       atomic.Int64
}

// Start serves with handler, accepting only client.
func Start(t *testing.T, client ssh.PublicKey, handler Handler) *Server {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &ssh.ServerConfig{PublicKeyCallback: func(_ ssh.ConnMetadata, k ssh.PublicKey) (*ssh.Permissions, error) {
		if string(k.Marshal()) == string(client.Marshal()) {
			return nil, nil
		}
		return nil, io.EOF
	}}
	cfg.AddHostKey(signer)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	s := &Server{Addr: l.Addr().String(), HostKey: signer.PublicKey(), keepalives: make(chan struct{}, 1024)}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go s.serve(c, cfg, handler)
		}
	}()
	return s
}

// Keepalives gets a value for each keepalive request a client sent
// (OpenSSH's keepalive@openssh.com), which the server refuses as
// OpenSSH's sshd does: the refusal is the answer.
func (s *Server) Keepalives() <-chan struct{} { return s.keepalives }

// Open is how many clients are connected now: a client that leaks its
// connections shows here.
func (s *Server) Open() int { return int(s.open.Load()) }

// Commands are the standard inputs of the sessions so far.
func (s *Server) Commands() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.commands...)
}

func (s *Server) serve(c net.Conn, cfg *ssh.ServerConfig, handler Handler) {
	sc, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		c.Close()
		return
	}
	s.open.Add(1)
	go func() {
		sc.Wait()
		s.open.Add(-1)
	}()
	go func() {
		for r := range reqs {
			if r.Type == "keepalive@openssh.com" {
				select {
				case s.keepalives <- struct{}{}:
				default:
				}
			}
			if r.WantReply {
				r.Reply(false, nil)
			}
		}
	}()
	for nc := range chans {
		if nc.ChannelType() != "session" {
			nc.Reject(ssh.UnknownChannelType, "session only")
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			continue
		}
		go func() {
			defer ch.Close()
			for r := range creqs {
				if r.Type != "exec" {
					r.Reply(false, nil)
					continue
				}
				r.Reply(true, nil)
				var cmd string
				if len(r.Payload) >= 4 {
					n := binary.BigEndian.Uint32(r.Payload)
					if int(n) <= len(r.Payload)-4 {
						cmd = string(r.Payload[4 : 4+n])
					}
				}
				in, _ := io.ReadAll(ch)
				s.mu.Lock()
				s.commands = append(s.commands, string(in))
				s.mu.Unlock()
				out, errOut, status := handler(cmd, string(in))
				io.WriteString(ch, out)
				io.WriteString(ch.Stderr(), errOut)
				ch.SendRequest("exit-status", false, binary.BigEndian.AppendUint32(nil, status))
				return
			}
		}()
	}
}
