// Package sshhostkeys gives a bootstrap machine sshd host keys of its own
// that survive reboots. The live OS on the stick carries none (keys built
// in would be the same on every stick built from one cache); at boot sshd
// gets the keys kept on the data disk, or new ones, which are kept there
// once the data disk exists.
package sshhostkeys

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/bootstick/bootstick/internal/atomicfile"
	"github.com/bootstick/bootstick/internal/sshkeys"
)

// Keys are the host key files of a folder: ssh_host_*_key and their .pub.
func Keys(dir string) ([]string, error) {
	m, err := filepath.Glob(filepath.Join(dir, "ssh_host_*_key*"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range m {
		if b := filepath.Base(p); strings.HasSuffix(b, "_key") || strings.HasSuffix(b, "_key.pub") {
			out = append(out, b)
		}
	}
	slices.Sort(out)
	return out, nil
}

// complete reports whether names hold at least one private key with its
// public half, and every private key has one.
func complete(names []string) bool {
	n := 0
	for _, b := range names {
		if strings.HasSuffix(b, "_key") {
			if !slices.Contains(names, b+".pub") {
				return false
			}
			n++
		}
	}
	return n > 0
}

// Result says what Ensure did.
type Result string

const (
	Restored  Result = "restored from the data disk"
	Generated Result = "generated"
)

// Ensure replaces the host keys in etcSSH: with the ones kept in store
// when it holds a complete set, else with a new ed25519 key (fast even
// under emulation, unlike RSA; sshd needs one host key). New keys are
// kept in store when keep is set (the data disk is mounted); Save keeps
// them later otherwise.
func Ensure(etcSSH, store string, keep bool) (Result, error) {
	kept, err := Keys(store)
	if err != nil {
		return "", err
	}
	if complete(kept) {
		if err := replace(etcSSH, store, kept); err != nil {
			return "", err
		}
		return Restored, nil
	}
	k, err := sshkeys.Generate(nil)
	if err != nil {
		return "", err
	}
	const name = "ssh_host_ed25519_key"
	if err := atomicfile.Write(filepath.Join(etcSSH, name), k.Private, 0o600); err != nil {
		return "", fmt.Errorf("writing host key: %w", err)
	}
	if err := atomicfile.Write(filepath.Join(etcSSH, name+".pub"), []byte(k.Public+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("writing host key: %w", err)
	}
	if err := removeOthers(etcSSH, []string{name, name + ".pub"}); err != nil {
		return "", err
	}
	if keep {
		if err := Save(etcSSH, store); err != nil {
			return "", err
		}
	}
	return Generated, nil
}

// Save keeps the host keys of etcSSH in store, unless store already holds
// a complete set. The folder is 0700 and private keys 0600.
func Save(etcSSH, store string) error {
	kept, err := Keys(store)
	if err != nil {
		return err
	}
	if complete(kept) {
		return nil
	}
	names, err := Keys(etcSSH)
	if err != nil {
		return err
	}
	if !complete(names) {
		return fmt.Errorf("no host keys in %s to keep", etcSSH)
	}
	if err := os.MkdirAll(store, 0o700); err != nil {
		return fmt.Errorf("keeping the host keys: %w", err)
	}
	return replace(store, etcSSH, names)
}

// replace writes the named files of src into dst (each atomically, the
// private keys 0600) and removes dst's other host keys.
func replace(dst, src string, names []string) error {
	for _, b := range names {
		data, err := os.ReadFile(filepath.Join(src, b))
		if err != nil {
			return fmt.Errorf("reading host key: %w", err)
		}
		mode := os.FileMode(0o600)
		if strings.HasSuffix(b, ".pub") {
			mode = 0o644
		}
		if err := atomicfile.Write(filepath.Join(dst, b), data, mode); err != nil {
			return fmt.Errorf("writing host key: %w", err)
		}
	}
	return removeOthers(dst, names)
}

// removeOthers removes the host keys of dir that names does not list.
func removeOthers(dir string, names []string) error {
	have, err := Keys(dir)
	if err != nil {
		return err
	}
	for _, b := range have {
		if !slices.Contains(names, b) {
			if err := os.Remove(filepath.Join(dir, b)); err != nil {
				return fmt.Errorf("removing host key: %w", err)
			}
		}
	}
	return nil
}
