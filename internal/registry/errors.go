package registry

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// errorCode is one of the codes in the OCI distribution spec's table of
// error codes. A 4XX answer with a JSON body must carry one of them, so the
// registry uses only those codes, on its 5XX answers too.
type errorCode string

// The codes that a read-only registry serving one layout can need.
const (
	codeBlobUnknown     errorCode = "BLOB_UNKNOWN"
	codeDigestInvalid   errorCode = "DIGEST_INVALID"
	codeManifestUnknown errorCode = "MANIFEST_UNKNOWN"
	codeNameUnknown     errorCode = "NAME_UNKNOWN"
	codeUnsupported     errorCode = "UNSUPPORTED"
)

// ociError is a failed request's answer: the HTTP status and the spec's
// code and message. The access log records its message.
type ociError struct {
	status  int
	code    errorCode
	message string
}

func (e *ociError) Error() string { return string(e.code) + ": " + e.message }

// errorBody is the spec's JSON error body: {"errors":[{"code","message"}]}.
type errorBody struct {
	Errors []errorEntry `json:"errors"`
}

type errorEntry struct {
	Code    errorCode `json:"code"`
	Message string    `json:"message"`
}

// write answers with e. Headers set for a success that did not happen
// (the content's digest and length) go first.
func (e *ociError) write(w http.ResponseWriter) {
	h := w.Header()
	h.Del("Docker-Content-Digest")
	h.Del("Content-Length")
	h.Set("Content-Type", "application/json")
	if e.status == http.StatusMethodNotAllowed {
		h.Set("Allow", "GET, HEAD")
	}
	w.WriteHeader(e.status)
	// The status is sent; a failed body write is the client's going away.
	_ = json.NewEncoder(w).Encode(errorBody{Errors: []errorEntry{{Code: e.code, Message: e.message}}})
}

// errReadOnly answers any method but GET and HEAD.
func errReadOnly() *ociError {
	return &ociError{http.StatusMethodNotAllowed, codeUnsupported, "this registry is read-only"}
}

// errNotServed answers a path that is not one of the pull endpoints:
// uploads, the catalog, referrers, anything outside /v2/. It stays a 404,
// which tells a client asking for referrers to fall back to the tag schema.
func errNotServed(path string) *ociError {
	return &ociError{http.StatusNotFound, codeUnsupported,
		fmt.Sprintf("%s is not served: this registry answers only /v2/, and manifests, blobs and tags/list of a repository", path)}
}

func errNameUnknown(key repoKey) *ociError {
	return &ociError{http.StatusNotFound, codeNameUnknown, fmt.Sprintf("repository %s is not in the bundle", key)}
}

func errManifestUnknown(key repoKey, ref string) *ociError {
	return &ociError{http.StatusNotFound, codeManifestUnknown, fmt.Sprintf("manifest %s:%s is not in the bundle", key, ref)}
}

func errBlobUnknown(key repoKey, dgst string) *ociError {
	return &ociError{http.StatusNotFound, codeBlobUnknown, fmt.Sprintf("blob %s is not in %s in the bundle", dgst, key)}
}

// errCorrupt answers for content the bundle holds whose bytes do not match
// their digest: the registry's fault, not the client's, so a 500, with the
// code the spec gives content that does not match its digest.
func errCorrupt(ce *corruptError) *ociError {
	return &ociError{http.StatusInternalServerError, codeDigestInvalid, ce.Error() + "; the bundle is damaged"}
}

// errUnreadable answers for content the bundle holds but the registry
// cannot read; code is what the client asked for (a manifest or a blob).
func errUnreadable(code errorCode, dgst string, err error) *ociError {
	return &ociError{http.StatusInternalServerError, code, fmt.Sprintf("reading blob %s: %v", dgst, err)}
}

// errBadCount answers a tags/list request whose n is not a count.
func errBadCount(n string) *ociError {
	return &ociError{http.StatusBadRequest, codeUnsupported, fmt.Sprintf("tags/list: n=%q is not a count of tags", n)}
}
