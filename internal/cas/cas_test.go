package cas

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const helloDigest = Digest("sha256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824")

func TestPutVerifyAndMismatch(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	d, n, err := s.Put(strings.NewReader("hello"), "")
	if err != nil || d != helloDigest || n != 5 {
		t.Fatalf("Put = %s, %d, %v; want %s, 5", d, n, err, helloDigest)
	}
	if err := s.Verify(d); err != nil {
		t.Fatal(err)
	}

	// Content that does not match the expected digest is not stored.
	want := Digest("sha256:" + strings.Repeat("0", 64))
	_, _, err = s.Put(strings.NewReader("not hello"), want)
	var me *MismatchError
	if !errors.As(err, &me) || me.Want != want {
		t.Fatalf("Put with the wrong digest: %v, want a MismatchError", err)
	}
	if s.Has(want) {
		t.Fatal("mismatched content was stored")
	}
	if left, _ := os.ReadDir(filepath.Join(s.Root, "tmp")); len(left) != 0 {
		t.Fatalf("tmp holds %d files after a mismatch", len(left))
	}

	// A corrupted blob is found and removed.
	p := s.BlobPath(d)
	os.Chmod(p, 0o644)
	os.WriteFile(p, []byte("jello"), 0o644)
	if err := s.Verify(d); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("Verify of a corrupted blob: %v", err)
	}
	if s.Has(d) {
		t.Fatal("corrupted blob still in the store")
	}
}

type rec struct{ D []Digest }

func (r *rec) Blobs() []Digest { return r.D }

func TestActionNeedsItsBlobs(t *testing.T) {
	s, _ := Open(t.TempDir())
	d, _, _ := s.Put(strings.NewReader("hello"), "")
	if err := s.PutAction("k", &rec{D: []Digest{helloDigest, "sha256:" + Digest(strings.Repeat("1", 64))}}); err == nil {
		t.Fatal("PutAction accepted a record naming a blob that is not stored")
	}
	if err := s.PutAction("k", &rec{D: []Digest{d}}); err != nil {
		t.Fatal(err)
	}
	var got rec
	if ok, err := s.GetAction("k", &got); !ok || err != nil || got.D[0] != d {
		t.Fatalf("GetAction = %v, %v, %+v", ok, err, got)
	}
	// When a blob disappears, the record no longer counts.
	os.Remove(s.BlobPath(d))
	if ok, _ := s.GetAction("k", &got); ok {
		t.Fatal("GetAction returned a record whose blob is gone")
	}
	if ok, _ := s.GetAction("missing", &got); ok {
		t.Fatal("GetAction found a record that was never stored")
	}
}

func TestLockExcludesASecondBuild(t *testing.T) {
	s, _ := Open(t.TempDir())
	unlock, err := s.Lock(false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Lock(false); err == nil || !strings.Contains(err.Error(), "in use by another build") {
		t.Fatalf("second Lock: %v", err)
	}
	unlock()
	unlock2, err := s.Lock(false)
	if err != nil {
		t.Fatalf("Lock after unlock: %v", err)
	}
	unlock2()
}
