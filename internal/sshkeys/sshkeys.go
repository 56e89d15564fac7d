// Package sshkeys makes and keeps the ed25519 key pair firstboot uses to
// reach the hosts it provisions. The private key lives only in a 0600 file
// (on the data disk) and in a Kubernetes Secret; it is never logged.
package sshkeys

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/crypto/ssh"

	"github.com/bootstick/bootstick/internal/atomicfile"
)

// File names inside the key folder.
const (
	PrivateKeyFile = "id_ed25519"
	PublicKeyFile  = "id_ed25519.pub"
)

// KeyPair is an ed25519 key pair in OpenSSH formats.
type KeyPair struct {
	// Private is the OpenSSH PEM private key. Never log it.
	Private []byte
	// Public is the authorized_keys line, without a newline.
	Public string
}

// String hides the private key from fmt.
func (k *KeyPair) String() string { return "ssh key " + k.Public }

// GoString hides the private key from %#v.
func (k *KeyPair) GoString() string { return k.String() }

const comment = "bootstick"

// Generate makes a new key pair from rand (crypto/rand.Reader when nil).
func Generate(r io.Reader) (*KeyPair, error) {
	if r == nil {
		r = rand.Reader
	}
	pub, priv, err := ed25519.GenerateKey(r)
	if err != nil {
		return nil, fmt.Errorf("generating ed25519 key: %w", err)
	}
	block, err := ssh.MarshalPrivateKey(priv, comment)
	if err != nil {
		return nil, fmt.Errorf("encoding ssh private key: %w", err)
	}
	spub, err := ssh.NewPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("encoding ssh public key: %w", err)
	}
	return &KeyPair{
		Private: pem.EncodeToMemory(block),
		Public:  string(bytes.TrimSpace(ssh.MarshalAuthorizedKey(spub))) + " " + comment,
	}, nil
}

// Parse checks an OpenSSH private key and derives its public half.
func Parse(private []byte) (*KeyPair, error) {
	key, err := ssh.ParseRawPrivateKey(private)
	if err != nil {
		// The parser's message never holds key bytes, but say less anyway.
		return nil, errors.New("not an unencrypted OpenSSH private key")
	}
	priv, ok := key.(*ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("a %T, want an ed25519 key", key)
	}
	spub, err := ssh.NewPublicKey(priv.Public())
	if err != nil {
		return nil, fmt.Errorf("encoding ssh public key: %w", err)
	}
	return &KeyPair{
		Private: private,
		Public:  string(bytes.TrimSpace(ssh.MarshalAuthorizedKey(spub))) + " " + comment,
	}, nil
}

// LoadOrGenerate returns the key pair kept in dir, making one (and dir,
// 0700) when there is none. The private key file is written 0600 through a
// temporary file and a rename, so a crash never leaves half a key; the
// public key file is rewritten from the private key when missing. A private
// key file that other users can read is an error.
func LoadOrGenerate(dir string) (*KeyPair, bool, error) {
	privPath := filepath.Join(dir, PrivateKeyFile)
	data, err := os.ReadFile(privPath)
	switch {
	case err == nil:
		fi, err := os.Stat(privPath)
		if err != nil {
			return nil, false, fmt.Errorf("reading ssh key: %w", err)
		}
		if fi.Mode().Perm()&0o077 != 0 {
			return nil, false, fmt.Errorf("ssh key %s is readable by others (mode %v): chmod 600 it", privPath, fi.Mode().Perm())
		}
		kp, err := Parse(data)
		if err != nil {
			return nil, false, fmt.Errorf("ssh key %s: %w", privPath, err)
		}
		if err := writeIfChanged(filepath.Join(dir, PublicKeyFile), []byte(kp.Public+"\n"), 0o644); err != nil {
			return nil, false, err
		}
		return kp, false, nil
	case errors.Is(err, fs.ErrNotExist):
	default:
		return nil, false, fmt.Errorf("reading ssh key: %w", err)
	}
	kp, err := Generate(nil)
	if err != nil {
		return nil, false, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, false, fmt.Errorf("making ssh key folder: %w", err)
	}
	if err := atomicfile.Write(privPath, kp.Private, 0o600); err != nil {
		return nil, false, err
	}
	if err := atomicfile.Write(filepath.Join(dir, PublicKeyFile), []byte(kp.Public+"\n"), 0o644); err != nil {
		return nil, false, err
	}
	return kp, true, nil
}

func writeIfChanged(path string, data []byte, mode os.FileMode) error {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return nil
	}
	return atomicfile.Write(path, data, mode)
}

// HostKeysDir is the folder, under a key folder, that keeps each host's
// SSH host key pair in a folder named for the host.
const HostKeysDir = "hosts"

// LoadOrGenerateHosts loads or makes the host key pair of each named
// host under dir/hosts/NAME, and returns them by name with the names of
// those made now.
func LoadOrGenerateHosts(dir string, names []string) (map[string]*KeyPair, []string, error) {
	out := make(map[string]*KeyPair, len(names))
	var created []string
	for _, n := range names {
		if n == "" || n == "." || n == ".." || strings.ContainsAny(n, "/\\") {
			return nil, nil, fmt.Errorf("host name %q cannot name a folder", n)
		}
		k, made, err := LoadOrGenerate(filepath.Join(dir, HostKeysDir, n))
		if err != nil {
			return nil, nil, err
		}
		if made {
			created = append(created, n)
		}
		out[n] = k
	}
	return out, created, nil
}
