package registry

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"sync"
	"time"
)

// Corruption is a blob whose bytes on disk do not match its digest.
type Corruption struct {
	Time   time.Time `json:"time"`
	Digest string    `json:"digest"`
	Path   string    `json:"path"`
	Image  string    `json:"image,omitempty"` // ns/repo of the request that found it
	Detail string    `json:"detail"`
}

// Corrupted lists the corrupted blobs found so far.
func (s *Server) Corrupted() []Corruption {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Corruption, 0, len(s.corrupt))
	for _, c := range s.corrupt {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Digest < out[j].Digest })
	return out
}

// recordCorrupt keeps and logs a corruption, and tells OnCorrupt about
// each digest once.
func (s *Server) recordCorrupt(ce *corruptError, image string) {
	c := Corruption{Time: time.Now().UTC(), Digest: ce.digest, Path: blobPath(s.dir, ce.digest), Image: image, Detail: ce.detail}
	s.mu.Lock()
	_, seen := s.corrupt[c.Digest]
	if !seen {
		s.corrupt[c.Digest] = c
	}
	s.mu.Unlock()
	s.log.Error("corrupted blob in the bundle's registry", "digest", c.Digest, "path", c.Path, "image", image, "detail", c.Detail)
	if !seen && s.opts.OnCorrupt != nil {
		s.opts.OnCorrupt(c)
	}
}

// corruptError is content whose size or digest is not the one it is
// stored under.
type corruptError struct{ digest, detail string }

func (e *corruptError) Error() string {
	return fmt.Sprintf("blob %s is corrupted: %s", e.digest, e.detail)
}

// readVerified reads a small blob whole and checks its size and digest.
func readVerified(dir string, d descriptor) ([]byte, error) {
	if !validDigest(d.Digest) {
		return nil, fmt.Errorf("digest %q is not a sha256 digest", d.Digest)
	}
	if d.Size > maxManifest {
		return nil, fmt.Errorf("manifest %s is %d bytes, more than %d", d.Digest, d.Size, maxManifest)
	}
	data, err := os.ReadFile(blobPath(dir, d.Digest))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) != d.Size {
		return nil, &corruptError{digest: d.Digest, detail: fmt.Sprintf("size %d, want %d", len(data), d.Size)}
	}
	sum := sha256.Sum256(data)
	if got := "sha256:" + hex.EncodeToString(sum[:]); got != d.Digest {
		return nil, &corruptError{digest: d.Digest, detail: "content has digest " + got}
	}
	return data, nil
}

// unreadable is the answer for a manifest or blob that cannot be read or
// is corrupted, found before any of it is sent. A corruption is recorded;
// another error is logged. code is what the client asked for.
func (s *Server) unreadable(key repoKey, dgst string, code errorCode, err error) *ociError {
	var ce *corruptError
	if errors.As(err, &ce) {
		s.recordCorrupt(ce, key.String())
		return errCorrupt(ce)
	}
	s.log.Error("reading blob", "digest", dgst, "err", err)
	return errUnreadable(code, dgst, err)
}

// blobSize is the size of a blob the repository holds: a config or a
// layer, or a manifest fetched as a blob.
func (rp *repo) blobSize(dgst string) (int64, bool) {
	if size, ok := rp.blobs[dgst]; ok {
		return size, true
	}
	md, ok := rp.manifests[dgst]
	return md.Size, ok
}

// chunk is how much of a blob is held back until the bytes before it are
// verified: the last chunk is only sent once the whole digest matches.
const chunk = 256 << 10

// serveBlob answers GET and HEAD of /v2/<name>/blobs/<digest>. A blob of
// one chunk or less is checked before the answer; a bigger one is checked
// as it streams (copyVerified), and a corrupted one ends in a dropped
// connection before its last chunk.
func (s *Server) serveBlob(w http.ResponseWriter, r *http.Request, rp *repo, key repoKey, dgst string, e *LogEntry) *ociError {
	e.Digest = dgst
	size, ok := rp.blobSize(dgst)
	if !ok {
		return errBlobUnknown(key, dgst)
	}
	f, err := os.Open(blobPath(s.dir, dgst))
	if err != nil {
		return s.unreadable(key, dgst, codeBlobUnknown, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return s.unreadable(key, dgst, codeBlobUnknown, err)
	}
	if fi.Size() != size {
		return s.unreadable(key, dgst, codeBlobUnknown, &corruptError{digest: dgst, detail: fmt.Sprintf("size %d, want %d", fi.Size(), size)})
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Docker-Content-Digest", dgst)
	w.Header().Set("Content-Length", fmt.Sprint(size))
	if size <= chunk && r.Method == http.MethodGet {
		// Small enough to check before answering: a corrupted one gets a
		// clean error instead of a dropped connection.
		data, err := readVerified(s.dir, descriptor{Digest: dgst, Size: size})
		if err != nil {
			return s.unreadable(key, dgst, codeBlobUnknown, err)
		}
		w.WriteHeader(http.StatusOK)
		w.Write(data)
		return nil
	}
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return nil
	}
	err = copyVerified(w, f, dgst)
	if err == nil {
		return nil
	}
	e.Error = err.Error()
	if errors.Is(err, errClientGone) {
		return nil
	}
	var ce *corruptError
	if errors.As(err, &ce) {
		s.recordCorrupt(ce, key.String())
	}
	// The status is sent: dropping the connection before the last bytes
	// is the only way left to say so, and the client sees a short body,
	// never a whole corrupted blob. net/http ends the response quietly.
	panic(http.ErrAbortHandler)
}

// errClientGone wraps a failed write to the client.
var errClientGone = errors.New("client went away")

// copyVerified streams r to w and checks that it has digest dgst. A reader
// goroutine reads the next chunk while this one hashes and sends the one
// before: the disk, the hash and the network overlap. The last chunk is
// held back until the whole content hashed right, so content that does
// not match is never sent whole. The error is a *corruptError for such
// content, wraps errClientGone when w fails, and otherwise is the read's.
func copyVerified(w io.Writer, r io.Reader, dgst string) error {
	h := sha256.New()
	parts, stop := readAhead(r)
	defer stop()
	var held []byte
	for p := range parts {
		if p.n > 0 {
			if held != nil {
				if _, err := w.Write(held); err != nil {
					return fmt.Errorf("%w: %w", errClientGone, err)
				}
				p.release(held)
			}
			h.Write(p.buf[:p.n])
			held = p.buf[:p.n]
		}
		if p.err == io.EOF || p.err == io.ErrUnexpectedEOF {
			break
		}
		if p.err != nil {
			return fmt.Errorf("reading blob: %w", p.err)
		}
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != dgst {
		return &corruptError{digest: dgst, detail: "content has digest " + got}
	}
	if len(held) > 0 {
		if _, err := w.Write(held); err != nil {
			return fmt.Errorf("%w: %w", errClientGone, err)
		}
	}
	return nil
}

// part is one chunk read ahead: n bytes of buf, and the read's error.
type part struct {
	buf     []byte
	n       int
	err     error
	release func([]byte) // hands a sent buffer back to the reader
}

// readAhead reads r in chunks on a goroutine of its own, at most two
// chunks ahead of the consumer, until an error (io.EOF at the end). stop
// ends the goroutine when the consumer gives up early.
func readAhead(r io.Reader) (<-chan part, func()) {
	const depth = 2
	free := make(chan []byte, depth+1)
	for range depth + 1 {
		free <- make([]byte, chunk)
	}
	parts := make(chan part, depth)
	done := make(chan struct{})
	release := func(b []byte) { free <- b[:cap(b)] }
	go func() {
		defer close(parts)
		for {
			var buf []byte
			select {
			case buf = <-free:
			case <-done:
				return
			}
			n, err := io.ReadFull(r, buf)
			select {
			case parts <- part{buf: buf, n: n, err: err, release: release}:
			case <-done:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	var once sync.Once
	return parts, func() { once.Do(func() { close(done) }) }
}
