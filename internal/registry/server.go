// Package registry serves the read side of the OCI distribution API straight
// from an OCI image layout on disk, read-only. Images keep their original
// names: a containerd mirror request for registry.k8s.io/pause:3.10 arrives
// as GET /v2/pause/manifests/3.10?ns=registry.k8s.io and is answered from the
// layout entry annotated io.containerd.image.name=registry.k8s.io/pause:3.10.
// Every blob is checked against its digest while it streams; a corrupted
// blob is never served whole.
//
// server.go opens the layout, routes requests and listens; manifests.go
// and blobs.go answer them (blobs.go holds the verifying reader);
// errors.go has the spec's error answers; layout.go reads the layout;
// accesslog.go writes and reads the access log.
package registry

import (
	"context"
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

// Options configure a Server.
type Options struct {
	// AccessLog receives one JSON line per request (see LogEntry).
	AccessLog io.Writer
	Log       *slog.Logger
	// OnCorrupt is called for each corrupted blob found, once per digest.
	OnCorrupt func(Corruption)
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

// ServeHTTP implements the read side of the distribution API and logs
// every request, once, when its answer is done.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e := &LogEntry{Time: time.Now().UTC(), Method: r.Method, Kind: "other", Remote: r.RemoteAddr}
	cw := &countingWriter{ResponseWriter: w}
	defer func() {
		// serveBlob aborts a response it cannot finish with
		// http.ErrAbortHandler; the log line is written on the way.
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
	if oe := s.route(cw, r, e); oe != nil {
		e.Error = oe.message
		oe.write(cw)
	}
}

// route sends a request to its handler and returns the error to answer
// with, if any.
func (s *Server) route(w http.ResponseWriter, r *http.Request, e *LogEntry) *ociError {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return errReadOnly()
	}
	if p := r.URL.Path; p == "/v2" || p == "/v2/" {
		e.Kind = "base"
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		if r.Method == http.MethodGet {
			io.WriteString(w, "{}")
		}
		return nil
	}
	name, kind, ref, ok := splitPath(r.URL.Path)
	if !ok {
		return errNotServed(r.URL.Path)
	}
	e.Kind = kind
	key := s.resolve(r.URL.Query().Get("ns"), name)
	e.NS, e.Repo = key.ns, key.repo
	rp := s.repos[key]
	if rp == nil {
		return errNameUnknown(key)
	}
	switch kind {
	case "tags":
		return serveTags(w, r, rp, name)
	case "manifest":
		return s.serveManifest(w, r, rp, key, ref, e)
	default:
		return s.serveBlob(w, r, rp, key, ref, e)
	}
}

// splitPath takes a pull endpoint's path apart: /v2/<name>/tags/list,
// /v2/<name>/manifests/<reference> or /v2/<name>/blobs/<digest>. kind is
// tags, manifest or blob, as the access log names it.
func splitPath(p string) (name, kind, ref string, ok bool) {
	rest, ok := strings.CutPrefix(p, "/v2/")
	if !ok {
		return "", "", "", false
	}
	if n, ok := strings.CutSuffix(rest, "/tags/list"); ok {
		return n, "tags", "", true
	}
	if i := strings.LastIndex(rest, "/manifests/"); i > 0 {
		return rest[:i], "manifest", rest[i+len("/manifests/"):], true
	}
	if i := strings.LastIndex(rest, "/blobs/"); i > 0 {
		return rest[:i], "blob", rest[i+len("/blobs/"):], true
	}
	return "", "", "", false
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
