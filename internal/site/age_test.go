package site

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"filippo.io/age"
	"filippo.io/age/armor"
)

func encrypt(t *testing.T, r age.Recipient, plain string) string {
	t.Helper()
	var buf bytes.Buffer
	aw := armor.NewWriter(&buf)
	w, err := age.Encrypt(aw, r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(w, plain); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := aw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

func TestAgeEncryptedPassword(t *testing.T) {
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	other, _ := age.GenerateX25519Identity()
	const pw = "Ag3Encrypted!"
	armored := encrypt(t, id.Recipient(), pw+"\n")

	dir := t.TempDir()
	idFile := filepath.Join(dir, "age.key")
	if err := os.WriteFile(idFile, []byte("# created: now\n"+id.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile("testdata/good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	indented := "      encryptedPassword: |\n        " + strings.ReplaceAll(strings.TrimSpace(armored), "\n", "\n        ") + "\n"
	data := []byte(strings.Replace(string(good), "      password: Sup3rSecretPW\n", indented, 1))
	path := filepath.Join("testdata", "age-site.yaml")

	ids, err := LoadIdentities(idFile)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Parse(path, data, Options{Identities: ids, BundledImages: testImages})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Hosts[0].BMC.Credentials.Password.Reveal(); got != pw {
		t.Fatalf("decrypted password = %q, want %q", got, pw)
	}

	for _, tc := range []struct {
		name string
		ids  []age.Identity
		want string
	}{
		{"no identity", nil, "hosts[0].bmc.credentials.encryptedPassword: Required value: the password is age-encrypted"},
		{"wrong identity", []age.Identity{other}, "hosts[0].bmc.credentials.encryptedPassword: Invalid value: none of the given age identities can decrypt it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(path, data, Options{Identities: tc.ids, BundledImages: testImages})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if strings.Contains(err.Error(), pw) {
				t.Fatal("error leaks the password")
			}
		})
	}

	if _, err := LoadIdentities("testdata/good.yaml"); err == nil || strings.Contains(err.Error(), "Sup3rSecretPW") {
		t.Fatalf("LoadIdentities of a non-key file: %v", err)
	}
}
