package registry

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// ServedManifests reads an access log (one LogEntry per line) and returns
// what it served: each manifest's reference as registry/repository:tag
// when it was asked for by tag, and each manifest's digest. Failed
// requests and blobs do not count.
func ServedManifests(log io.Reader) (map[string]bool, error) {
	out := map[string]bool{}
	sc := bufio.NewScanner(log)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var e LogEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return out, fmt.Errorf("registry access log line %d: %w", n, err)
		}
		if e.Kind != "manifest" || e.Status != 200 {
			continue
		}
		if e.Reference != "" && !strings.HasPrefix(e.Reference, "sha256:") {
			out[e.NS+"/"+e.Repo+":"+e.Reference] = true
		}
		if e.Digest != "" {
			out[e.Digest] = true
		}
	}
	return out, sc.Err()
}
