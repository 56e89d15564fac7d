package sshkeys

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
)

func TestLoadOrGenerate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "keys")
	kp, created, err := LoadOrGenerate(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !created {
		t.Fatal("first call did not create a key")
	}
	fi, err := os.Stat(filepath.Join(dir, PrivateKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("private key mode %v, want 0600", fi.Mode().Perm())
	}
	if di, _ := os.Stat(dir); di.Mode().Perm() != 0o700 {
		t.Errorf("key folder mode %v, want 0700", di.Mode().Perm())
	}
	pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(kp.Public))
	if err != nil || pub.Type() != ssh.KeyAlgoED25519 {
		t.Fatalf("public key %q: %v", kp.Public, err)
	}
	signer, err := ssh.ParsePrivateKey(kp.Private)
	if err != nil {
		t.Fatal(err)
	}
	if string(signer.PublicKey().Marshal()) != string(pub.Marshal()) {
		t.Fatal("public key does not match the private key")
	}

	again, created, err := LoadOrGenerate(dir)
	if err != nil || created {
		t.Fatalf("second call: created=%v err=%v", created, err)
	}
	if again.Public != kp.Public || string(again.Private) != string(kp.Private) {
		t.Fatal("second call returned another key")
	}

	// The public file is restored from the private key.
	os.Remove(filepath.Join(dir, PublicKeyFile))
	if _, _, err := LoadOrGenerate(dir); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, PublicKeyFile)); strings.TrimSpace(string(b)) != kp.Public {
		t.Fatalf("public key file = %q", b)
	}

	// fmt never shows the private key.
	for _, f := range []string{"%v", "%+v", "%#v", "%s"} {
		if s := fmt.Sprintf(f, kp); strings.Contains(s, "PRIVATE") || strings.Contains(s, string(kp.Private[40:80])) {
			t.Errorf("%s shows the private key: %s", f, s)
		}
	}
}

func TestLoadRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		data string
		mode os.FileMode
		want string
	}{
		{"loose mode", "", 0o644, "readable by others"},
		{"garbage", "not a key\n", 0o600, "not an unencrypted OpenSSH private key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			data := []byte(tc.data)
			if tc.data == "" {
				kp, err := Generate(nil)
				if err != nil {
					t.Fatal(err)
				}
				data = kp.Private
			}
			if err := os.WriteFile(filepath.Join(dir, PrivateKeyFile), data, tc.mode); err != nil {
				t.Fatal(err)
			}
			_, _, err := LoadOrGenerate(dir)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}
