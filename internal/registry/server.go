// Package registry serves the read side of the OCI distribution API straight
// from an OCI image layout on disk, read-only. Images keep their original
// names: a containerd mirror request for registry.k8s.io/pause:3.10 arrives
// as GET /v2/pause/manifests/3.10?ns=registry.k8s.io and is answered from the
// layout entry annotated io.containerd.image.name=registry.k8s.io/pause:3.10.
// Every blob is checked against its digest while it streams; a corrupted
// blob is never served whole.
package registry

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
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

// Options configure a Server.
type Options struct {
	// AccessLog receives one JSON line per request (see LogEntry).
	AccessLog io.Writer
	Log       *slog.Logger
	// OnCorrupt is called for each corrupted blob found, once per digest.
	OnCorrupt func(Corruption)
}

// LogEntry is one line of the access log.
type LogEntry struct {
	Time      time.Time `json:"time"`
	Method    string    `json:"method"`
	NS        string    `json:"ns,omitempty"`
	Repo      string    `json:"repo,omitempty"`
	Kind      string    `json:"kind"` // base, manifest, blob, tags, other
	Reference string    `json:"reference,omitempty"`
	Digest    string    `json:"digest,omitempty"`
	Status    int       `json:"status"`
	Bytes     int64     `json:"bytes"`
	Error     string    `json:"error,omitempty"`
	Remote    string    `json:"remote,omitempty"`
}

// Server is an http.Handler serving one layout.
type Server struct {
	dir   string
	opts  Options
	log   *slog.Logger
	repos map[repoKey]*repo
	names []string

	mu      sync.Mutex // guards the access log and corrupt
	corrupt map[string]Corruption
}

// Open reads the layout's index.json and every manifest it names, checking
// their digests. Images whose manifests are corrupted are reported through
// OnCorrupt and left out, so the rest of the layout is still served.
func Open(dir string, opts Options) (*Server, error) {
	s := &Server{dir: dir, opts: opts, log: opts.Log, repos: map[repoKey]*repo{}, corrupt: map[string]Corruption{}}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	data, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		return nil, fmt.Errorf("opening OCI layout %s: %w", dir, err)
	}
	var idx index
	if err := json.Unmarshal(data, &idx); err != nil {
		return nil, fmt.Errorf("opening OCI layout %s: index.json: %w", dir, err)
	}
	for i, d := range idx.Manifests {
		name := d.Annotations[AnnotationImageName]
		if name == "" {
			s.log.Warn("layout entry has no image name; not served", "index", i, "digest", d.Digest)
			continue
		}
		ref, err := ParseRef(name)
		if err != nil {
			return nil, fmt.Errorf("opening OCI layout %s: index.json manifests[%d]: %w", dir, i, err)
		}
		key := repoKey{ref.Registry, ref.Repository}
		r := s.repos[key]
		if r == nil {
			r = &repo{tags: map[string]descriptor{}, manifests: map[string]descriptor{}, blobs: map[string]int64{}}
			s.repos[key] = r
		}
		if err := r.walk(dir, d, 0); err != nil {
			var ce *corruptError
			if errors.As(err, &ce) {
				s.recordCorrupt(ce, key.String())
				continue
			}
			return nil, fmt.Errorf("opening OCI layout %s: image %s: %w", dir, name, err)
		}
		r.tags[ref.Tag] = r.manifests[d.Digest]
		s.names = append(s.names, ref.String())
	}
	sort.Strings(s.names)
	return s, nil
}

// Images lists the full references served, sorted.
func (s *Server) Images() []string { return append([]string(nil), s.names...) }

// Digest is the manifest digest the layout holds for a reference's tag.
func (s *Server) Digest(ref string) (string, bool) {
	r, err := ParseRef(ref)
	if err != nil {
		return "", false
	}
	rp, ok := s.repos[repoKey{r.Registry, r.Repository}]
	if !ok {
		return "", false
	}
	d, ok := rp.tags[r.Tag]
	return d.Digest, ok
}

// Has reports whether the bundle serves the image a reference names: by
// its tag, or by its digest within its own repository (name@sha256:...).
func (s *Server) Has(ref string) bool {
	r, err := ParseRef(ref)
	if err != nil {
		return false
	}
	rp, ok := s.repos[repoKey{r.Registry, r.Repository}]
	if !ok {
		return false
	}
	if _, d, byDigest := strings.Cut(ref, "@"); byDigest {
		_, ok = rp.manifests[d]
	} else {
		_, ok = rp.tags[r.Tag]
	}
	return ok
}

// Registries lists the upstream registries the layout holds images for.
func (s *Server) Registries() []string {
	seen := map[string]bool{}
	var out []string
	for k := range s.repos {
		if !seen[k.ns] {
			seen[k.ns] = true
			out = append(out, k.ns)
		}
	}
	sort.Strings(out)
	return out
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

// ServeHTTP implements the read side of the distribution API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e := &LogEntry{Time: time.Now().UTC(), Method: r.Method, Kind: "other", Remote: r.RemoteAddr}
	cw := &countingWriter{ResponseWriter: w}
	defer func() {
		if p := recover(); p != nil {
			if p != http.ErrAbortHandler {
				e.Error = fmt.Sprint("panic: ", p)
			}
			s.writeLog(e, cw)
			panic(p)
		}
		s.writeLog(e, cw)
	}()
	cw.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		e.Error = "read-only registry"
		writeError(cw, http.StatusMethodNotAllowed, "UNSUPPORTED", "this registry is read-only")
		return
	}
	p := r.URL.Path
	if p == "/v2" || p == "/v2/" {
		e.Kind = "base"
		cw.Header().Set("Content-Type", "application/json")
		cw.WriteHeader(http.StatusOK)
		if r.Method == http.MethodGet {
			io.WriteString(cw, "{}")
		}
		return
	}
	rest, ok := strings.CutPrefix(p, "/v2/")
	if !ok {
		e.Error = "not a /v2/ path"
		writeError(cw, http.StatusNotFound, "NOT_FOUND", "not found")
		return
	}
	var name, kind, ref string
	if n, ok := strings.CutSuffix(rest, "/tags/list"); ok {
		name, kind = n, "tags"
	} else if i := strings.LastIndex(rest, "/manifests/"); i > 0 {
		name, kind, ref = rest[:i], "manifest", rest[i+len("/manifests/"):]
	} else if i := strings.LastIndex(rest, "/blobs/"); i > 0 {
		name, kind, ref = rest[:i], "blob", rest[i+len("/blobs/"):]
	} else {
		e.Error = "unknown path"
		writeError(cw, http.StatusNotFound, "NOT_FOUND", "not found")
		return
	}
	e.Kind = kind
	key := s.resolve(r.URL.Query().Get("ns"), name)
	e.NS, e.Repo = key.ns, key.repo
	rp := s.repos[key]
	if rp == nil {
		e.Error = "repository not in the bundle"
		writeError(cw, http.StatusNotFound, "NAME_UNKNOWN", fmt.Sprintf("repository %s is not in the bundle", key))
		return
	}
	switch kind {
	case "tags":
		tags := make([]string, 0, len(rp.tags))
		for t := range rp.tags {
			tags = append(tags, t)
		}
		sort.Strings(tags)
		cw.Header().Set("Content-Type", "application/json")
		json.NewEncoder(cw).Encode(map[string]any{"name": name, "tags": tags})
	case "manifest":
		s.serveManifest(cw, r, rp, key, ref, e)
	case "blob":
		s.serveBlob(cw, r, rp, key, ref, e)
	}
}

// resolve maps a request to a repository. Mirror requests carry the
// upstream registry in ns; a direct request may name it as the first path
// component (GET /v2/registry.k8s.io/pause/manifests/3.10).
func (s *Server) resolve(ns, name string) repoKey {
	if ns != "" {
		return repoKey{ns, name}
	}
	if first, rest, ok := strings.Cut(name, "/"); ok {
		if _, found := s.repos[repoKey{first, rest}]; found {
			return repoKey{first, rest}
		}
	}
	return repoKey{"docker.io", name}
}

func (s *Server) serveManifest(w *countingWriter, r *http.Request, rp *repo, key repoKey, ref string, e *LogEntry) {
	var d descriptor
	var ok bool
	if strings.HasPrefix(ref, "sha256:") {
		e.Digest = ref
		d, ok = rp.manifests[ref]
	} else {
		e.Reference = ref
		d, ok = rp.tags[ref]
		e.Digest = d.Digest
	}
	if !ok {
		e.Error = "manifest not in the bundle"
		writeError(w, http.StatusNotFound, "MANIFEST_UNKNOWN", fmt.Sprintf("manifest %s:%s is not in the bundle", key, ref))
		return
	}
	data, err := readVerified(s.dir, d)
	if err != nil {
		s.failBlob(w, key, d.Digest, err, e)
		return
	}
	w.Header().Set("Content-Type", d.MediaType)
	w.Header().Set("Docker-Content-Digest", d.Digest)
	w.Header().Set("Content-Length", fmt.Sprint(len(data)))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		w.Write(data)
	}
}

// chunk is how much of a blob is held back until the bytes before it are
// verified: the last chunk is only sent once the whole digest matches.
const chunk = 256 << 10

func (s *Server) serveBlob(w *countingWriter, r *http.Request, rp *repo, key repoKey, dgst string, e *LogEntry) {
	e.Digest = dgst
	size, ok := rp.blobs[dgst]
	if !ok {
		if md, isManifest := rp.manifests[dgst]; isManifest {
			size, ok = md.Size, true
		}
	}
	if !ok {
		e.Error = "blob not in the bundle"
		writeError(w, http.StatusNotFound, "BLOB_UNKNOWN", fmt.Sprintf("blob %s is not in %s in the bundle", dgst, key))
		return
	}
	f, err := os.Open(blobPath(s.dir, dgst))
	if err != nil {
		s.failBlob(w, key, dgst, err, e)
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		s.failBlob(w, key, dgst, err, e)
		return
	}
	if fi.Size() != size {
		s.failBlob(w, key, dgst, &corruptError{digest: dgst, detail: fmt.Sprintf("size %d, want %d", fi.Size(), size)}, e)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Docker-Content-Digest", dgst)
	if size <= chunk && r.Method == http.MethodGet {
		// Small enough to check before answering: a corrupted one gets a
		// clean error instead of a dropped connection.
		data, err := readVerified(s.dir, descriptor{Digest: dgst, Size: size})
		if err != nil {
			w.Header().Del("Docker-Content-Digest")
			s.failBlob(w, key, dgst, err, e)
			return
		}
		w.Header().Set("Content-Length", fmt.Sprint(size))
		w.WriteHeader(http.StatusOK)
		w.Write(data)
		return
	}
	w.Header().Set("Content-Length", fmt.Sprint(size))
	if r.Method == http.MethodHead {
		w.WriteHeader(http.StatusOK)
		return
	}
	w.WriteHeader(http.StatusOK)

	// A reader goroutine reads the next chunk while this one hashes and
	// sends the one before: the disk, the hash and the network overlap.
	// The last chunk is held back until the whole blob hashed right.
	h := sha256.New()
	parts, stop := readAhead(f)
	defer stop()
	var held []byte
	for p := range parts {
		if p.n > 0 {
			if held != nil {
				if _, err := w.Write(held); err != nil {
					e.Error = "client went away: " + err.Error()
					return
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
			e.Error = "reading blob: " + p.err.Error()
			panic(http.ErrAbortHandler)
		}
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != dgst {
		ce := &corruptError{digest: dgst, detail: "content has digest " + got}
		s.recordCorrupt(ce, key.String())
		e.Error = ce.Error()
		// Drop the connection before the last bytes: the client sees a
		// short body, never a whole corrupted blob.
		panic(http.ErrAbortHandler)
	}
	if len(held) > 0 {
		w.Write(held)
	}
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

// failBlob answers a request whose blob cannot be read or is corrupted,
// before any of it is sent.
func (s *Server) failBlob(w http.ResponseWriter, key repoKey, dgst string, err error, e *LogEntry) {
	e.Error = err.Error()
	var ce *corruptError
	if errors.As(err, &ce) {
		s.recordCorrupt(ce, key.String())
		writeError(w, http.StatusInternalServerError, "BLOB_UNKNOWN", ce.Error()+"; the bundle is damaged")
		return
	}
	s.log.Error("reading blob", "digest", dgst, "err", err)
	writeError(w, http.StatusInternalServerError, "UNKNOWN", fmt.Sprintf("reading blob %s: %v", dgst, err))
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"errors": []map[string]string{{"code": code, "message": msg}}})
}

func (s *Server) writeLog(e *LogEntry, cw *countingWriter) {
	e.Status, e.Bytes = cw.status, cw.n
	if e.Status == 0 {
		e.Status = http.StatusOK
	}
	if s.opts.AccessLog == nil {
		return
	}
	line, err := json.Marshal(e)
	if err != nil {
		return
	}
	s.mu.Lock()
	s.opts.AccessLog.Write(append(line, '\n'))
	s.mu.Unlock()
}

type countingWriter struct {
	http.ResponseWriter
	status int
	n      int64
}

func (c *countingWriter) WriteHeader(code int) {
	if c.status == 0 {
		c.status = code
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *countingWriter) Write(p []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	n, err := c.ResponseWriter.Write(p)
	c.n += int64(n)
	return n, err
}

// Serve listens on every address and serves until ctx ends. ready, when not
// nil, is called with the bound addresses once all listeners are up (useful
// with port 0).
func (s *Server) Serve(ctx context.Context, addrs []string, ready func([]net.Addr)) error {
	if len(addrs) == 0 {
		return errors.New("registry: no listen address")
	}
	var lns []net.Listener
	for _, a := range addrs {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return fmt.Errorf("registry: listening on %s: %w", a, err)
		}
		lns = append(lns, ln)
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 30 * time.Second,
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug)}
	errc := make(chan error, len(lns))
	bound := make([]net.Addr, len(lns))
	for i, ln := range lns {
		bound[i] = ln.Addr()
		go func() { errc <- srv.Serve(ln) }()
	}
	s.log.Info("registry serving", "layout", s.dir, "addresses", bound, "images", len(s.names))
	if ready != nil {
		ready(bound)
	}
	select {
	case <-ctx.Done():
	case err := <-errc:
		srv.Close()
		return fmt.Errorf("registry: %w", err)
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(shutdownCtx)
	return nil
}
