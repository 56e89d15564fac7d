// Package cas is bootstick's content-addressed cache: blobs stored by sha256,
// and an action cache that maps the hash of a step's inputs to a small JSON
// record of its outputs.
//
// Every write goes to a temporary file in the cache's tmp folder and is
// renamed into place after fsync, so an interrupted run never leaves an entry
// that looks complete. An action record is written only after every blob it
// names is in the store, so a record implies its outputs.
//
// Layout under Root:
//
//	blobs/sha256/<hex>   blobs (the same layout as an OCI image layout's blobs)
//	actions/<hex>.json   action records
//	tmp/                 work in progress; cleared by Clean
//	lock                 flock held by a running build
package cas

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/bootstick/bootstick/internal/flock"

	"github.com/bootstick/bootstick/internal/atomicfile"
)

// DefaultRoot is the cache folder: $BOOTSTICK_CACHE, else
// /var/cache/bootstick. Every tool and test finds the cache through it.
func DefaultRoot() string {
	if d := os.Getenv("BOOTSTICK_CACHE"); d != "" {
		return d
	}
	return "/var/cache/bootstick"
}

// Store is a cache rooted at a folder.
type Store struct {
	Root string
}

// Open creates the cache's folders if needed.
func Open(root string) (*Store, error) {
	if root == "" {
		return nil, errors.New("no cache folder given")
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("cache %s: %w", root, err)
	}
	for _, d := range []string{"blobs/sha256", "actions", "tmp"} {
		if err := os.MkdirAll(filepath.Join(abs, d), 0o755); err != nil {
			return nil, fmt.Errorf("creating cache %s: %w", abs, err)
		}
	}
	return &Store{Root: abs}, nil
}

// Digest is "sha256:<hex>".
type Digest string

// Hex is the digest without its algorithm.
func (d Digest) Hex() string { return strings.TrimPrefix(string(d), "sha256:") }

// ParseDigest checks that s is a sha256 digest.
func ParseDigest(s string) (Digest, error) {
	h, ok := strings.CutPrefix(s, "sha256:")
	if !ok || len(h) != 64 {
		return "", fmt.Errorf("digest %q: want sha256:<64 hex digits>", s)
	}
	if _, err := hex.DecodeString(h); err != nil {
		return "", fmt.Errorf("digest %q: %w", s, err)
	}
	return Digest(s), nil
}

// BlobPath is where a blob lives, whether or not it is there.
func (s *Store) BlobPath(d Digest) string {
	return filepath.Join(s.Root, "blobs", "sha256", d.Hex())
}

// Has reports whether the blob is in the store.
func (s *Store) Has(d Digest) bool {
	_, err := os.Stat(s.BlobPath(d))
	return err == nil
}

// Writer writes one blob. Commit moves it into place under its digest;
// Abort (or a Commit that fails) removes the temporary file. Calling Abort
// after Commit does nothing, so `defer w.Abort()` is always safe.
type Writer struct {
	s    *Store
	f    *os.File
	h    hash.Hash
	n    int64
	done bool
}

// Create starts a new blob.
func (s *Store) Create() (*Writer, error) {
	f, err := os.CreateTemp(filepath.Join(s.Root, "tmp"), "blob-*")
	if err != nil {
		return nil, fmt.Errorf("creating blob in cache %s: %w", s.Root, err)
	}
	return &Writer{s: s, f: f, h: sha256.New()}, nil
}

func (w *Writer) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	w.h.Write(p[:n])
	w.n += int64(n)
	return n, err
}

// Size is the number of bytes written so far.
func (w *Writer) Size() int64 { return w.n }

// Digest is the digest of what was written so far.
func (w *Writer) Digest() Digest { return Digest("sha256:" + hex.EncodeToString(w.h.Sum(nil))) }

// Commit stores the blob. When want is not empty and differs from what was
// written, nothing is stored and the error names both digests.
func (w *Writer) Commit(want Digest) (Digest, error) {
	defer w.Abort()
	got := w.Digest()
	if want != "" && want != got {
		return "", &MismatchError{Want: want, Got: got}
	}
	if err := w.f.Sync(); err != nil {
		return "", fmt.Errorf("writing blob %s: %w", got, err)
	}
	if err := w.f.Close(); err != nil {
		return "", fmt.Errorf("writing blob %s: %w", got, err)
	}
	if err := os.Chmod(w.f.Name(), 0o444); err != nil {
		return "", fmt.Errorf("writing blob %s: %w", got, err)
	}
	if err := os.Rename(w.f.Name(), w.s.BlobPath(got)); err != nil {
		return "", fmt.Errorf("storing blob %s: %w", got, err)
	}
	w.done = true
	return got, atomicfile.SyncDir(filepath.Dir(w.s.BlobPath(got)))
}

// Abort drops the blob unless it was committed.
func (w *Writer) Abort() {
	if w.done {
		return
	}
	w.done = true
	w.f.Close()
	os.Remove(w.f.Name())
}

// MismatchError says content did not hash to what was expected.
type MismatchError struct{ Want, Got Digest }

func (e *MismatchError) Error() string {
	return fmt.Sprintf("sha256 mismatch: expected %s, got %s", e.Want, e.Got)
}

// Put stores everything r yields, checking it against want when want is
// not empty.
func (s *Store) Put(r io.Reader, want Digest) (Digest, int64, error) {
	if want != "" && s.Has(want) {
		n, err := io.Copy(io.Discard, r)
		return want, n, err
	}
	w, err := s.Create()
	if err != nil {
		return "", 0, err
	}
	defer w.Abort()
	if _, err := io.Copy(w, r); err != nil {
		return "", 0, fmt.Errorf("writing blob: %w", err)
	}
	d, err := w.Commit(want)
	return d, w.Size(), err
}

// PutFile stores a copy of the file at path.
func (s *Store) PutFile(path string) (Digest, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	d, n, err := s.Put(f, "")
	if err != nil {
		return "", 0, fmt.Errorf("storing %s: %w", path, err)
	}
	return d, n, nil
}

// HashFile returns a file's sha256 digest and size.
func HashFile(p string) (Digest, int64, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, fmt.Errorf("reading %s: %w", p, err)
	}
	return Digest("sha256:" + hex.EncodeToString(h.Sum(nil))), n, nil
}

// DigestOf is the sha256 digest of b.
func DigestOf(b []byte) Digest {
	s := sha256.Sum256(b)
	return Digest("sha256:" + hex.EncodeToString(s[:]))
}

// Verify re-hashes a stored blob. A blob that does not match its name is
// removed, so the next run fetches or builds it again.
func (s *Store) Verify(d Digest) error {
	got, _, err := HashFile(s.BlobPath(d))
	if err != nil {
		return fmt.Errorf("blob %s: %w", d, err)
	}
	if got != d {
		os.Remove(s.BlobPath(d))
		return fmt.Errorf("blob %s in cache %s is corrupt (it hashes to %s); removed it, run again to rebuild", d, s.Root, got)
	}
	return nil
}

// Link makes the blob appear at dst: a hard link where the file system
// allows, else a copy. dst's folder must exist.
func (s *Store) Link(d Digest, dst string) error {
	src := s.BlobPath(d)
	if err := os.Link(src, dst); err == nil || errors.Is(err, fs.ErrExist) {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("blob %s: %w", d, err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return fmt.Errorf("copying blob %s: %w", d, err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		os.Remove(dst)
		return fmt.Errorf("copying blob %s to %s: %w", d, dst, err)
	}
	return out.Close()
}

// Key hashes the JSON form of a step's inputs into an action key.
func Key(inputs any) (string, error) {
	b, err := json.Marshal(inputs)
	if err != nil {
		return "", fmt.Errorf("hashing inputs: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

func (s *Store) actionPath(key string) string {
	return filepath.Join(s.Root, "actions", key+".json")
}

// GetAction loads the record stored under key into out. It returns false
// when there is none, or when a blob the record names is gone (Blobs
// reports which ones a record needs).
func (s *Store) GetAction(key string, out Blobs) (bool, error) {
	b, err := os.ReadFile(s.actionPath(key))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading cache record %s: %w", key, err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		// A record we cannot read is treated as missing: the step reruns.
		return false, nil
	}
	for _, d := range out.Blobs() {
		if !s.Has(d) {
			return false, nil
		}
	}
	return true, nil
}

// Blobs is implemented by action records: the blobs the record refers to.
type Blobs interface{ Blobs() []Digest }

// PutAction stores a record under key. Every blob it names must be stored
// already.
func (s *Store) PutAction(key string, rec Blobs) error {
	for _, d := range rec.Blobs() {
		if !s.Has(d) {
			return fmt.Errorf("cache record %s names blob %s, which is not stored", key, d)
		}
	}
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding cache record %s: %w", key, err)
	}
	return atomicfile.Write(s.actionPath(key), b, 0o644)
}

// TempDir makes a work folder inside the cache, on the same file system as
// the blobs so results can be renamed into place.
func (s *Store) TempDir(pattern string) (string, error) {
	d, err := os.MkdirTemp(filepath.Join(s.Root, "tmp"), pattern)
	if err != nil {
		return "", fmt.Errorf("creating work folder in cache %s: %w", s.Root, err)
	}
	return d, nil
}

// Lock takes the cache's exclusive lock, so two builds never share its tmp
// folder. It waits for another holder unless wait is false.
func (s *Store) Lock(wait bool) (unlock func(), err error) {
	path := filepath.Join(s.Root, "lock")
	var l *flock.Lock
	if wait {
		l, err = flock.Wait(context.Background(), path)
	} else {
		l, err = flock.Try(path)
	}
	if errors.Is(err, flock.ErrLocked) {
		return nil, fmt.Errorf("cache %s is in use by another build: wait for it to finish", s.Root)
	}
	if err != nil {
		return nil, fmt.Errorf("locking cache %s: %w", s.Root, err)
	}
	return func() { l.Release() }, nil
}

// Clean removes leftovers of interrupted runs from tmp. Call it with the
// lock held.
func (s *Store) Clean() error {
	tmp := filepath.Join(s.Root, "tmp")
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return fmt.Errorf("cleaning cache %s: %w", s.Root, err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(tmp, e.Name())); err != nil {
			return fmt.Errorf("cleaning cache %s: %w", s.Root, err)
		}
	}
	return nil
}

// HashTree hashes a folder's names, modes, link targets and contents.
func HashTree(dir string) (string, error) {
	entries := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		v := fi.Mode().String()
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			t, err := os.Readlink(p)
			if err != nil {
				return err
			}
			v += " -> " + t
		case d.Type().IsRegular():
			h, _, err := HashFile(p)
			if err != nil {
				return err
			}
			v += " " + string(h)
		}
		entries[rel] = v
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("hashing %s: %w", dir, err)
	}
	return Key(entries)
}
