package qemutest

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSearchDisk checks the thief's read of a data disk image: a secret
// is found wherever it lies (across two reads, after a hole), one that is
// not there is not, and an image without a LUKS header is refused.
func TestSearchDisk(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "data.img")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(64 << 20); err != nil {
		t.Fatal(err)
	}
	across := strings.Repeat("A", 20) + strings.Repeat("B", 20) // lies across the 8 MiB read boundary
	afterHole := "-----secret-after-a-hole-0123456789-----"
	absent := "-----a-secret-that-is-nowhere-012345678-----"
	for _, w := range []struct {
		at   int64
		data string
	}{{0, string(luksMagic)}, {8<<20 - 20, across}, {40 << 20, afterHole}} {
		if _, err := f.WriteAt([]byte(w.data), w.at); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	secrets := []secret{{"across", "a", []byte(across)}, {"after a hole", "b", []byte(afterHole)}, {"absent", "c", []byte(absent)}}
	found, scanned, err := SearchDisk(img, secrets)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range found {
		names = append(names, s.what)
	}
	if got := strings.Join(names, ", "); got != "across, after a hole" {
		t.Errorf("found %q, want the two secrets on the image", got)
	}
	if scanned == 0 || scanned >= 64<<20 {
		t.Errorf("scanned %d bytes of a 64 MiB image with three small extents: the holes were read, or nothing was", scanned)
	}

	plain := filepath.Join(dir, "plain.img")
	if err := os.WriteFile(plain, bytes.Repeat([]byte{0}, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := SearchDisk(plain, secrets); err == nil || !strings.Contains(err.Error(), "LUKS header") {
		t.Errorf("an image without a LUKS header: err %v, want one naming the LUKS header", err)
	}
}

// TestNeedles checks the pieces of secrets the search looks for.
func TestNeedles(t *testing.T) {
	pem := "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIOTNWlNbYv5T4r4m8zX2qJ4lQ0Xj\nshort\n-----END PRIVATE KEY-----\n"
	if got := pemBody(pem); got != "MC4CAQAwBQYDK2VwBCIEIOTNWlNbYv5T4r4m8zX2qJ4lQ0Xj" {
		t.Errorf("pemBody = %q", got)
	}
	enc := "kind: EncryptionConfiguration\nresources:\n- providers:\n  - aescbc:\n      keys:\n      - name: key1\n        secret: c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3I=\n"
	if got := valueOf("secret:")(enc); got != "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3I=" {
		t.Errorf("valueOf(secret:) = %q", got)
	}
	age := "# created: 2026-11-28\n# public key: age1xyz\nAGE-SECRET-KEY-1QQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQ\n"
	if got := valueOf("")(age); !strings.HasPrefix(got, "AGE-SECRET-KEY-1") || len(got) != 64 {
		t.Errorf("valueOf() = %q, want the identity's first 64 bytes", got)
	}
}
