package site

import (
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bootstick/bootstick/internal/testkit"
)

// testCA is a PEM CA certificate and its PEM private key.
func testCA(t *testing.T) (cert, key []byte) {
	t.Helper()
	cert, key, err := testkit.CA("site BMC CA")
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// TestBMCCAFile: bootstrap.bmcCAFile is read beside the site file and
// carries only certificates; anything else is refused with the field path
// and what to do, and a private key is never quoted.
func TestBMCCAFile(t *testing.T) {
	cert, key := testCA(t)
	cert2, _ := testCA(t)
	good, err := os.ReadFile("testdata/good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		file    []byte // nil: no file
		want    string // "" when it loads
		wantPEM []byte
	}{
		{name: "one CA", file: cert, wantPEM: cert},
		{name: "two CAs, with openssl's text before each", file: []byte("subject=CN=a\n" + string(cert) + "subject=CN=b\n" + string(cert2)), wantPEM: append(append([]byte{}, cert...), cert2...)},
		{name: "missing", want: "bootstrap.bmcCAFile: Invalid value: \"bmc-ca.pem\": cannot read it"},
		{name: "a private key with it", file: append(append([]byte{}, cert...), key...), want: "block 2 is a private key: remove it at once"},
		{name: "not PEM", file: []byte("hello\n"), want: "no PEM certificate in it"},
		{name: "trailing junk", file: append(append([]byte{}, cert...), "-----BEGIN CERT"...), want: "text after its last certificate"},
		{name: "a broken certificate", file: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("nope")}), want: "certificate 1 does not parse"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			site := strings.Replace(string(good), "  dataDisk:", "  bmcCAFile: bmc-ca.pem\n  dataDisk:", 1)
			if site == string(good) {
				t.Fatal("testdata/good.yaml has no bootstrap.dataDisk to put bmcCAFile beside")
			}
			path := filepath.Join(dir, "site.yaml")
			if err := os.WriteFile(path, []byte(site), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.CopyFS(filepath.Join(dir, "creds"), os.DirFS("testdata/creds")); err != nil {
				t.Fatal(err)
			}
			if tc.file != nil {
				if err := os.WriteFile(filepath.Join(dir, "bmc-ca.pem"), tc.file, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			s, err := Load(path, Options{BundledImages: testImages})
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				got, err := s.Bootstrap.BMCCA(s.Dir)
				if err != nil || string(got) != string(tc.wantPEM) {
					t.Fatalf("BMCCA: %v\n%s\nwant\n%s", err, got, tc.wantPEM)
				}
				return
			}
			if err == nil {
				t.Fatalf("Load succeeded, want an error with %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error:\n%v\nwant it to contain %q", err, tc.want)
			}
			if strings.Contains(err.Error(), strings.Split(string(key), "\n")[1]) {
				t.Errorf("the error quotes the private key:\n%v", err)
			}
		})
	}
}
