package registry

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
)

// serveManifest answers GET and HEAD of /v2/<name>/manifests/<reference>,
// by tag or by digest. A manifest is read whole and checked against its
// digest before any of it is sent.
func (s *Server) serveManifest(w http.ResponseWriter, r *http.Request, rp *repo, key repoKey, ref string, e *LogEntry) *ociError {
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
		return errManifestUnknown(key, ref)
	}
	data, err := readVerified(s.dir, d)
	if err != nil {
		return s.unreadable(key, d.Digest, codeManifestUnknown, err)
	}
	w.Header().Set("Content-Type", d.MediaType)
	w.Header().Set("Docker-Content-Digest", d.Digest)
	w.Header().Set("Content-Length", fmt.Sprint(len(data)))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		w.Write(data)
	}
	return nil
}

// serveTags answers /v2/<name>/tags/list: the repository's tags, sorted.
// last leaves out every tag up to and including it; n keeps the first n
// of the rest (n=0: none).
func serveTags(w http.ResponseWriter, r *http.Request, rp *repo, name string) *ociError {
	tags := make([]string, 0, len(rp.tags))
	for t := range rp.tags {
		tags = append(tags, t)
	}
	sort.Strings(tags)
	q := r.URL.Query()
	if last := q.Get("last"); last != "" {
		i := sort.SearchStrings(tags, last)
		if i < len(tags) && tags[i] == last {
			i++
		}
		tags = tags[i:]
	}
	if q.Has("n") {
		n, err := strconv.Atoi(q.Get("n"))
		if err != nil || n < 0 {
			return errBadCount(q.Get("n"))
		}
		tags = tags[:min(n, len(tags))]
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(struct {
		Name string   `json:"name"`
		Tags []string `json:"tags"`
	}{name, tags})
	return nil
}
