package registry

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// The registries below are made-up names: nothing is ever contacted.
const (
	apiserverRef = "registry.example/kube-apiserver:v1.34.4"
	corednsRef   = "registry.example/coredns/coredns:v1.12.1"
	hubRef       = "docker.io/library/busybox:1.36"
	multiRef     = "other.example:5000/team/multi:v1"
)

type fixture struct {
	dir    string
	images map[string]v1.Image
	index  v1.ImageIndex
}

func makeLayout(t *testing.T) *fixture {
	t.Helper()
	dir := t.TempDir()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	fx := &fixture{dir: dir, images: map[string]v1.Image{}}
	for _, ref := range []string{apiserverRef, corednsRef, hubRef} {
		img, err := random.Image(600<<10, 2) // layers bigger than two chunks
		if err != nil {
			t.Fatal(err)
		}
		if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
			AnnotationImageName: ref, AnnotationRefName: ref[strings.LastIndex(ref, ":")+1:]})); err != nil {
			t.Fatal(err)
		}
		fx.images[ref] = img
	}
	idx, err := random.Index(1024, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{AnnotationImageName: multiRef})); err != nil {
		t.Fatal(err)
	}
	fx.index = idx
	// An unnamed entry is ignored.
	img, _ := random.Image(100, 1)
	if err := p.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	return fx
}

// nsTransport makes requests the way containerd's mirror support does:
// the upstream registry goes in the ns query parameter.
type nsTransport struct{ ns string }

func (n nsTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	q := r.URL.Query()
	q.Set("ns", n.ns)
	r.URL.RawQuery = q.Encode()
	return http.DefaultTransport.RoundTrip(r)
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) entries(t *testing.T) []LogEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []LogEntry
	sc := bufio.NewScanner(bytes.NewReader(s.b.Bytes()))
	for sc.Scan() {
		var e LogEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("access log line %q: %v", sc.Text(), err)
		}
		out = append(out, e)
	}
	return out
}

func startServer(t *testing.T, dir string) (*Server, *httptest.Server, *syncBuffer, *[]Corruption) {
	t.Helper()
	var access syncBuffer
	var mu sync.Mutex
	var corrupt []Corruption
	s, err := Open(dir, Options{AccessLog: &access, OnCorrupt: func(c Corruption) {
		mu.Lock()
		corrupt = append(corrupt, c)
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return s, ts, &access, &corrupt
}

// mirrorRef is how containerd addresses upstream ref through the mirror.
func mirrorRef(t *testing.T, ts *httptest.Server, upstream string) (name.Reference, remote.Option) {
	t.Helper()
	r, err := ParseRef(upstream)
	if err != nil {
		t.Fatal(err)
	}
	host := strings.TrimPrefix(ts.URL, "http://")
	ref, err := name.ParseReference(host+"/"+r.Repository+":"+r.Tag, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	return ref, remote.WithTransport(nsTransport{r.Registry})
}

func TestPullThroughMirror(t *testing.T) {
	fx := makeLayout(t)
	s, ts, access, corrupt := startServer(t, fx.dir)

	if got, want := strings.Join(s.Images(), " "), strings.Join([]string{hubRef, multiRef, corednsRef, apiserverRef}, " "); got != want {
		t.Errorf("Images() = %s, want %s", got, want)
	}
	if got := strings.Join(s.Registries(), " "); got != "docker.io other.example:5000 registry.example" {
		t.Errorf("Registries() = %s", got)
	}
	for _, upstream := range []string{apiserverRef, corednsRef, hubRef} {
		t.Run(upstream, func(t *testing.T) {
			ref, opt := mirrorRef(t, ts, upstream)
			img, err := remote.Image(ref, opt)
			if err != nil {
				t.Fatalf("pulling %s: %v", upstream, err)
			}
			if err := validate.Image(img); err != nil {
				t.Fatalf("pulled %s does not validate: %v", upstream, err)
			}
			got, _ := img.Digest()
			want, _ := fx.images[upstream].Digest()
			if got != want {
				t.Errorf("digest %s, want %s", got, want)
			}
			// And by digest.
			byDigest := ref.Context().Digest(want.String())
			if _, err := remote.Image(byDigest, opt); err != nil {
				t.Errorf("pulling by digest: %v", err)
			}
		})
	}
	t.Run("index and its children", func(t *testing.T) {
		ref, opt := mirrorRef(t, ts, multiRef)
		idx, err := remote.Index(ref, opt)
		if err != nil {
			t.Fatal(err)
		}
		if err := validate.Index(idx); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("direct path names the registry", func(t *testing.T) {
		host := strings.TrimPrefix(ts.URL, "http://")
		ref, err := name.ParseReference(host+"/registry.example/kube-apiserver:v1.34.4", name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := remote.Image(ref); err != nil {
			t.Fatal(err)
		}
	})
	if len(*corrupt) != 0 {
		t.Errorf("corruption reported on a good layout: %v", *corrupt)
	}

	// The access log names every request with ns, repo and reference.
	var sawTag, sawBlob bool
	for _, e := range access.entries(t) {
		if e.Kind == "manifest" && e.NS == "registry.example" && e.Repo == "kube-apiserver" && e.Reference == "v1.34.4" && e.Status == 200 && e.Digest != "" {
			sawTag = true
		}
		if e.Kind == "blob" && e.NS == "docker.io" && e.Repo == "library/busybox" && e.Status == 200 && e.Bytes > 0 && e.Method == "GET" {
			sawBlob = true
		}
		if e.Error != "" {
			t.Errorf("access log has an error on a good layout: %+v", e)
		}
	}
	if !sawTag || !sawBlob {
		t.Errorf("access log lacks the manifest-by-tag (%v) or blob (%v) entries", sawTag, sawBlob)
	}
}

// TestProtocol checks the successful answers; TestErrorAnswers the failed.
func TestProtocol(t *testing.T) {
	fx := makeLayout(t)
	_, ts, _, _ := startServer(t, fx.dir)
	img := fx.images[apiserverRef]
	mdigest, _ := img.Digest()
	msize, _ := img.Size()
	mt, _ := img.MediaType()
	layers, _ := img.Layers()
	ldigest, _ := layers[0].Digest()
	lsize, _ := layers[0].Size()

	tests := []struct {
		name, method, path string
		status             int
		header             map[string]string
		bodyLen            int64 // -1: don't check
	}{
		{"base", "GET", "/v2/", 200, map[string]string{"Docker-Distribution-API-Version": "registry/2.0"}, 2},
		{"manifest by tag", "GET", "/v2/kube-apiserver/manifests/v1.34.4?ns=registry.example", 200,
			map[string]string{"Content-Type": string(mt), "Docker-Content-Digest": mdigest.String()}, msize},
		{"manifest head", "HEAD", "/v2/kube-apiserver/manifests/v1.34.4?ns=registry.example", 200,
			map[string]string{"Docker-Content-Digest": mdigest.String(), "Content-Length": itoa(msize)}, 0},
		{"manifest by digest", "GET", "/v2/kube-apiserver/manifests/" + mdigest.String() + "?ns=registry.example", 200,
			map[string]string{"Docker-Content-Digest": mdigest.String()}, msize},
		{"blob", "GET", "/v2/kube-apiserver/blobs/" + ldigest.String() + "?ns=registry.example", 200,
			map[string]string{"Content-Type": "application/octet-stream", "Docker-Content-Digest": ldigest.String()}, lsize},
		{"blob head", "HEAD", "/v2/kube-apiserver/blobs/" + ldigest.String() + "?ns=registry.example", 200,
			map[string]string{"Content-Length": itoa(lsize)}, 0},
		{"tags", "GET", "/v2/kube-apiserver/tags/list?ns=registry.example", 200, map[string]string{"Content-Type": "application/json"}, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, ts.URL+tt.path, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, body)
			}
			for k, v := range tt.header {
				if got := resp.Header.Get(k); got != v {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
			if tt.bodyLen >= 0 && int64(len(body)) != tt.bodyLen {
				t.Errorf("body %d bytes, want %d", len(body), tt.bodyLen)
			}
		})
	}
}

// TestErrorAnswers: every failed request is answered with the status and
// the OCI error code the distribution spec gives it, in the spec's JSON
// body, and the access log records the same status.
func TestErrorAnswers(t *testing.T) {
	fx := makeLayout(t)
	_, ts, access, _ := startServer(t, fx.dir)
	api := fx.images[apiserverRef]
	mdigest, _ := api.Digest()
	layers, _ := api.Layers()
	ldigest, _ := layers[0].Digest()

	// Damage the layout after Open, as a failing medium would: a small
	// blob and a manifest corrupted, a big blob and an index gone.
	coredns := fx.images[corednsRef]
	cfgDigest, _ := coredns.ConfigName()
	corruptFile(t, blobPath(fx.dir, cfgDigest.String()), 0)
	cLayers, _ := coredns.Layers()
	goneLayer, _ := cLayers[0].Digest()
	if err := os.Remove(blobPath(fx.dir, goneLayer.String())); err != nil {
		t.Fatal(err)
	}
	hubManifest, _ := fx.images[hubRef].Digest()
	corruptFile(t, blobPath(fx.dir, hubManifest.String()), 3)
	idxDigest, _ := fx.index.Digest()
	if err := os.Remove(blobPath(fx.dir, idxDigest.String())); err != nil {
		t.Fatal(err)
	}

	const api2 = "/v2/kube-apiserver"
	const ns = "?ns=registry.example"
	tests := []struct {
		name, method, path string
		status             int
		code               errorCode
	}{
		{"unknown repository: manifest", "GET", "/v2/nope/manifests/v1" + ns, 404, codeNameUnknown},
		{"unknown repository: blob", "GET", "/v2/nope/blobs/" + ldigest.String() + ns, 404, codeNameUnknown},
		{"unknown repository: tags", "GET", "/v2/nope/tags/list" + ns, 404, codeNameUnknown},
		{"unknown repository: head", "HEAD", "/v2/nope/manifests/v1" + ns, 404, codeNameUnknown},
		{"same repository on another registry", "GET", api2 + "/manifests/v1.34.4?ns=elsewhere.example", 404, codeNameUnknown},
		{"unknown tag", "GET", api2 + "/manifests/v9" + ns, 404, codeManifestUnknown},
		{"unknown tag: head", "HEAD", api2 + "/manifests/v9" + ns, 404, codeManifestUnknown},
		{"unknown manifest digest", "GET", api2 + "/manifests/sha256:" + zeros(64) + ns, 404, codeManifestUnknown},
		{"another repository's manifest", "GET", "/v2/coredns/coredns/manifests/" + mdigest.String() + ns, 404, codeManifestUnknown},
		{"unknown blob", "GET", api2 + "/blobs/sha256:" + zeros(64) + ns, 404, codeBlobUnknown},
		{"unknown blob: head", "HEAD", api2 + "/blobs/sha256:" + zeros(64) + ns, 404, codeBlobUnknown},
		{"another repository's blob", "GET", "/v2/coredns/coredns/blobs/" + ldigest.String() + ns, 404, codeBlobUnknown},
		{"not a digest", "GET", api2 + "/blobs/latest" + ns, 404, codeBlobUnknown},
		{"manifest push", "PUT", api2 + "/manifests/v2" + ns, 405, codeUnsupported},
		{"upload", "POST", api2 + "/blobs/uploads/" + ns, 405, codeUnsupported},
		{"delete", "DELETE", api2 + "/blobs/" + ldigest.String() + ns, 405, codeUnsupported},
		{"catalog", "GET", "/v2/_catalog", 404, codeUnsupported},
		{"referrers", "GET", api2 + "/referrers/" + mdigest.String() + ns, 404, codeUnsupported},
		{"outside /v2/", "GET", "/healthz", 404, codeUnsupported},
		{"tags: n not a count", "GET", api2 + "/tags/list" + ns + "&n=ten", 400, codeUnsupported},
		{"tags: n below zero", "GET", api2 + "/tags/list" + ns + "&n=-1", 400, codeUnsupported},
		{"corrupted small blob", "GET", "/v2/coredns/coredns/blobs/" + cfgDigest.String() + ns, 500, codeDigestInvalid},
		{"corrupted manifest", "GET", "/v2/library/busybox/manifests/1.36?ns=docker.io", 500, codeDigestInvalid},
		{"unreadable blob", "GET", "/v2/coredns/coredns/blobs/" + goneLayer.String() + ns, 500, codeBlobUnknown},
		{"unreadable index", "GET", "/v2/team/multi/manifests/v1?ns=other.example:5000", 500, codeManifestUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, ts.URL+tt.path, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.status {
				t.Errorf("status %d, want %d: %s", resp.StatusCode, tt.status, body)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q, want application/json", ct)
			}
			if d := resp.Header.Get("Docker-Content-Digest"); d != "" {
				t.Errorf("an error answer carries Docker-Content-Digest %s", d)
			}
			if allow := resp.Header.Get("Allow"); (tt.status == 405) != (allow == "GET, HEAD") {
				t.Errorf("status %d with Allow %q", resp.StatusCode, allow)
			}
			if tt.method == "HEAD" {
				if len(body) != 0 {
					t.Errorf("HEAD answered with a body: %s", body)
				}
				return
			}
			var eb struct {
				Errors []map[string]string `json:"errors"`
			}
			if err := json.Unmarshal(body, &eb); err != nil {
				t.Fatalf("body %q is not the spec's error JSON: %v", body, err)
			}
			if len(eb.Errors) != 1 || eb.Errors[0]["code"] != string(tt.code) || eb.Errors[0]["message"] == "" || len(eb.Errors[0]) != 2 {
				t.Errorf("errors = %v, want one with code %s and a message", eb.Errors, tt.code)
			}
		})
	}
	// The access log has each request once, with its status and error.
	var logged int
	for _, e := range access.entries(t) {
		if e.Status >= 400 {
			logged++
			if e.Error == "" {
				t.Errorf("access log entry without its error: %+v", e)
			}
		}
	}
	if logged != len(tests) {
		t.Errorf("access log has %d failed requests, want %d", logged, len(tests))
	}
}

// TestTagsList pages through tags with n and last as the spec has them.
func TestTagsList(t *testing.T) {
	dir := t.TempDir()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	img, err := random.Image(100, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, tag := range []string{"v2", "v1", "v3"} {
		if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{AnnotationImageName: "registry.example/app:" + tag})); err != nil {
			t.Fatal(err)
		}
	}
	_, ts, _, _ := startServer(t, dir)
	for query, want := range map[string]string{
		"":              "v1 v2 v3",
		"&n=2":          "v1 v2",
		"&n=0":          "",
		"&n=9":          "v1 v2 v3",
		"&last=v1":      "v2 v3",
		"&last=v1&n=1":  "v2",
		"&last=v0":      "v1 v2 v3",
		"&last=v3":      "",
		"&last=v10&n=1": "v2",
	} {
		resp, err := http.Get(ts.URL + "/v2/app/tags/list?ns=registry.example" + query)
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Name string   `json:"name"`
			Tags []string `json:"tags"`
		}
		err = json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: status %d, %v", query, resp.StatusCode, err)
		}
		if got.Name != "app" || got.Tags == nil || strings.Join(got.Tags, " ") != want {
			t.Errorf("tags/list%s = %+v, want name app and tags [%s]", query, got, want)
		}
	}
}

func itoa(n int64) string    { return jsonNum(n) }
func jsonNum(n int64) string { b, _ := json.Marshal(n); return string(b) }

func corruptFile(t *testing.T, path string, at int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	f.ReadAt(b, at)
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, at); err != nil {
		t.Fatal(err)
	}
}

func TestCorruptedBlobIsNeverServedWhole(t *testing.T) {
	fx := makeLayout(t)
	img := fx.images[apiserverRef]
	layers, _ := img.Layers()
	ldigest, _ := layers[1].Digest()
	lsize, _ := layers[1].Size()
	cfgDigest, _ := img.ConfigName()
	cfgSize := int64(len(must(img.RawConfigFile())))
	// Flip a byte in the middle of a big layer and at the start of the small config.
	corruptFile(t, blobPath(fx.dir, ldigest.String()), lsize/2)
	corruptFile(t, blobPath(fx.dir, cfgDigest.String()), 0)

	s, ts, access, corrupt := startServer(t, fx.dir)

	for _, c := range []struct {
		digest v1.Hash
		size   int64
	}{{ldigest, lsize}, {cfgDigest, cfgSize}} {
		resp, err := http.Get(ts.URL + "/v2/kube-apiserver/blobs/" + c.digest.String() + "?ns=registry.example")
		if err != nil {
			t.Fatal(err)
		}
		body, rerr := io.ReadAll(resp.Body)
		resp.Body.Close()
		if c.size <= chunk {
			// Small blobs are checked before the answer: a clean error naming the blob.
			if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(string(body), c.digest.String()) {
				t.Errorf("small corrupted blob: status %d body %q; want 500 naming %s", resp.StatusCode, body, c.digest)
			}
			continue
		}
		if rerr == nil || int64(len(body)) >= c.size {
			t.Errorf("blob %s: read %d of %d bytes with err %v; want a short, failed read", c.digest, len(body), c.size, rerr)
		}
	}

	// A whole pull fails.
	ref, opt := mirrorRef(t, ts, apiserverRef)
	if pulled, err := remote.Image(ref, opt); err == nil {
		if err := validate.Image(pulled); err == nil {
			t.Error("pulling an image with a corrupted blob succeeded")
		}
	}
	// Other images still pull.
	ref, opt = mirrorRef(t, ts, corednsRef)
	if pulled, err := remote.Image(ref, opt); err != nil || validate.Image(pulled) != nil {
		t.Errorf("a good image next to a corrupted one does not pull: %v", err)
	}

	// The aborted handlers record and log the corruption as they unwind,
	// after the client has its failed answer: wait for both records.
	loggedCorrupt := func() bool {
		for _, e := range access.entries(t) {
			if e.Digest == ldigest.String() && strings.Contains(e.Error, "corrupted") {
				return true
			}
		}
		return false
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(s.Corrupted()) < 2 || !loggedCorrupt() {
		if time.Now().After(deadline) {
			break // the checks below say what is missing
		}
		time.Sleep(5 * time.Millisecond) // polling the two records
	}
	got := map[string]bool{}
	for _, c := range s.Corrupted() {
		got[c.Digest] = true
		if c.Path == "" || c.Image != "registry.example/kube-apiserver" {
			t.Errorf("corruption record lacks its path or image: %+v", c)
		}
	}
	if !got[ldigest.String()] || !got[cfgDigest.String()] || len(*corrupt) != 2 {
		t.Errorf("Corrupted() = %v, OnCorrupt got %d; want both %s and %s once", s.Corrupted(), len(*corrupt), ldigest, cfgDigest)
	}
	if !loggedCorrupt() {
		t.Error("the access log does not name the corrupted blob")
	}
}

func TestCorruptedManifest(t *testing.T) {
	fx := makeLayout(t)
	md, _ := fx.images[corednsRef].Digest()
	corruptFile(t, blobPath(fx.dir, md.String()), 5)
	s, ts, _, corrupt := startServer(t, fx.dir)
	if len(*corrupt) != 1 || (*corrupt)[0].Digest != md.String() {
		t.Fatalf("OnCorrupt = %v, want the manifest %s", *corrupt, md)
	}
	for _, img := range s.Images() {
		if img == corednsRef {
			t.Error("an image with a corrupted manifest is still listed")
		}
	}
	ref, opt := mirrorRef(t, ts, apiserverRef)
	if _, err := remote.Image(ref, opt); err != nil {
		t.Errorf("the other images must still be served: %v", err)
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(dir, Options{}); err == nil || !strings.Contains(err.Error(), dir) {
		t.Errorf("missing index.json: err = %v", err)
	}
	os.WriteFile(dir+"/index.json", []byte(`{"manifests": [{"digest": "sha256:x", "annotations": {"io.containerd.image.name": "Bad//Name"}}]}`), 0o644)
	if _, err := Open(dir, Options{}); err == nil || !strings.Contains(err.Error(), "manifests[0]") {
		t.Errorf("bad name: err = %v", err)
	}
}

func TestParseRef(t *testing.T) {
	pinned := "sha256:" + strings.Repeat("ab", 32)
	tests := []struct{ in, want string }{
		{"registry.k8s.io/kube-apiserver:v1.34.4", "registry.k8s.io/kube-apiserver:v1.34.4"},
		{"registry.k8s.io/coredns/coredns:v1.12.1", "registry.k8s.io/coredns/coredns:v1.12.1"},
		{"busybox", "docker.io/library/busybox:latest"},
		{"team/app:1", "docker.io/team/app:1"},
		{"localhost:5000/app:2@" + pinned, "localhost:5000/app:2"},
	}
	for _, tt := range tests {
		got, err := ParseRef(tt.in)
		if err != nil || got.String() != tt.want {
			t.Errorf("ParseRef(%q) = %v, %v; want %s", tt.in, got, err, tt.want)
		}
	}
	// The digest is kept apart, not dropped.
	if got, err := ParseRef("quay.io/x/y:v1@" + pinned); err != nil || got.Digest != pinned || got.Tag != "v1" {
		t.Errorf("ParseRef of a pinned reference = %+v, %v; want tag v1 and digest %s", got, err, pinned)
	}
	for _, bad := range []string{"", "Upper/case", "a//b", "localhost:5000/app:2@sha256:abc"} {
		if _, err := ParseRef(bad); err == nil {
			t.Errorf("ParseRef(%q) succeeded", bad)
		}
	}
}

func TestServeListensAndStops(t *testing.T) {
	fx := makeLayout(t)
	s, err := Open(fx.dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan []net.Addr, 1)
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, []string{"127.0.0.1:0", "[::1]:0"}, func(a []net.Addr) { addrs <- a }) }()
	var bound []net.Addr
	select {
	case bound = <-addrs:
	case err := <-done:
		t.Fatalf("Serve: %v", err)
	}
	if len(bound) != 2 {
		t.Fatalf("bound %v", bound)
	}
	for _, a := range bound {
		resp, err := http.Get("http://" + a.String() + "/v2/")
		if err != nil {
			t.Fatalf("GET on %s: %v", a, err)
		}
		resp.Body.Close()
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve after cancel: %v", err)
	}
	// A taken address is an error naming it.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	if err := s.Serve(context.Background(), []string{ln.Addr().String()}, nil); err == nil || !strings.Contains(err.Error(), ln.Addr().String()) {
		t.Errorf("taken address: err = %v", err)
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// TestHas answers what firstboot asks before it waits for a Deployment:
// does the bundle serve this image, by tag or by digest?
func TestHas(t *testing.T) {
	fx := makeLayout(t)
	s, err := Open(fx.dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := fx.images[apiserverRef].Digest()
	if err != nil {
		t.Fatal(err)
	}
	other, _ := fx.images[corednsRef].Digest()
	for ref, want := range map[string]bool{
		apiserverRef: true,
		"registry.example/kube-apiserver@" + d.String():       true,
		"registry.example/kube-apiserver:v9.9.9":              false,
		"registry.example/kube-apiserver@" + other.String():   false, // another repository's digest
		"registry.example/kube-apiserver@sha256:" + zeros(64): false,
		"registry.example/nothing:v1":                         false,
		"busybox:1.36":                                        true, // docker.io/library/ by default
		"Not/A/Reference":                                     false,
	} {
		if got := s.Has(ref); got != want {
			t.Errorf("Has(%q) = %v, want %v", ref, got, want)
		}
	}
}

func zeros(n int) string { return strings.Repeat("0", n) }
