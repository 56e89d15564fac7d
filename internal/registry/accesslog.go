package registry

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

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

// writeLog completes e with what cw sent and writes it as one line.
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

// countingWriter keeps the status and the body's length for the log.
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

// ReadAccessLog calls fn with each entry of an access log (one LogEntry
// per line; blank lines are skipped). A line that is not an entry ends it
// with an error naming the line.
func ReadAccessLog(log io.Reader, fn func(LogEntry)) error {
	sc := bufio.NewScanner(log)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var e LogEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return fmt.Errorf("registry access log line %d: %w", n, err)
		}
		fn(e)
	}
	return sc.Err()
}

// ServedManifests reads an access log (one LogEntry per line) and returns
// what it served: each manifest's reference as registry/repository:tag
// when it was asked for by tag, and each manifest's digest. Failed
// requests and blobs do not count.
func ServedManifests(log io.Reader) (map[string]bool, error) {
	out := map[string]bool{}
	err := ReadAccessLog(log, func(e LogEntry) {
		if e.Kind != "manifest" || e.Status != 200 {
			return
		}
		if e.Reference != "" && !strings.HasPrefix(e.Reference, "sha256:") {
			out[e.NS+"/"+e.Repo+":"+e.Reference] = true
		}
		if e.Digest != "" {
			out[e.Digest] = true
		}
	})
	return out, err
}
