package fetch

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bootstick/bootstick/internal/cas"
)

func digest(b []byte) cas.Digest {
	s := sha256.Sum256(b)
	return cas.Digest("sha256:" + hex.EncodeToString(s[:]))
}

// server serves files by path with Range support, counting requests. A
// path in cut is served only up to half its length the first time, then
// the connection is dropped (an interrupted download).
type server struct {
	files  map[string][]byte
	mu     sync.Mutex
	gets   map[string]int
	ranges map[string][]string
	cut    map[string]bool
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	data, ok := s.files[r.URL.Path]
	if !ok {
		http.NotFound(w, r)
		return
	}
	s.mu.Lock()
	if r.Method == http.MethodGet {
		s.gets[r.URL.Path]++
	}
	if rg := r.Header.Get("Range"); rg != "" {
		s.ranges[r.URL.Path] = append(s.ranges[r.URL.Path], rg)
	}
	cut := s.cut[r.URL.Path] && r.Method == http.MethodGet
	if cut {
		delete(s.cut, r.URL.Path)
	}
	s.mu.Unlock()
	if cut {
		w.Header().Set("Content-Length", fmt.Sprint(len(data)))
		w.Header().Set("Accept-Ranges", "bytes")
		w.WriteHeader(http.StatusOK)
		w.Write(data[:len(data)/2])
		w.(http.Flusher).Flush()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	}
	http.ServeContent(w, r, r.URL.Path, time.Unix(0, 0), bytes.NewReader(data))
}

func newServer(t *testing.T, files map[string][]byte) (*server, *httptest.Server) {
	s := &server{files: files, gets: map[string]int{}, ranges: map[string][]string{}, cut: map[string]bool{}}
	ts := httptest.NewServer(s) // listens on 127.0.0.1
	t.Cleanup(ts.Close)
	return s, ts
}

type countProgress struct {
	mu     sync.Mutex
	starts int
	total  int64
	added  int64
}

func (c *countProgress) Start(name string, total int64) {
	c.mu.Lock()
	c.starts++
	c.total = total
	c.mu.Unlock()
}
func (c *countProgress) Add(n int64) { c.mu.Lock(); c.added += n; c.mu.Unlock() }
func (c *countProgress) Done()       {}

func TestFetchParallelAndCached(t *testing.T) {
	files := map[string][]byte{}
	var items []Item
	for i := range 5 {
		b := bytes.Repeat([]byte{byte('a' + i)}, 100_000+i)
		p := fmt.Sprintf("/f%d.img", i)
		files[p] = b
	}
	s, ts := newServer(t, files)
	for p, b := range files {
		items = append(items, Item{URL: ts.URL + p, SHA256: digest(b), Size: int64(len(b))})
	}
	store, err := cas.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	prog := &countProgress{}
	f := &Fetcher{Store: store, Workers: 3, Progress: prog}
	res, err := f.Fetch(context.Background(), items)
	if err != nil {
		t.Fatal(err)
	}
	var want int64
	for i, r := range res {
		if !r.Downloaded || r.SHA256 != items[i].SHA256 || !store.Has(r.SHA256) {
			t.Errorf("result %d: %+v", i, r)
		}
		if err := store.Verify(r.SHA256); err != nil {
			t.Error(err)
		}
		want += items[i].Size
	}
	if prog.total != want || prog.added != want {
		t.Errorf("progress total %d added %d, want %d", prog.total, prog.added, want)
	}
	// Again: everything is in the cache, nothing is requested.
	before := len(s.gets)
	gets := 0
	for _, n := range s.gets {
		gets += n
	}
	res, err = f.Fetch(context.Background(), items)
	if err != nil {
		t.Fatal(err)
	}
	after := 0
	for _, n := range s.gets {
		after += n
	}
	if after != gets || len(s.gets) != before {
		t.Errorf("a cached fetch made %d requests", after-gets)
	}
	for _, r := range res {
		if r.Downloaded {
			t.Errorf("%s downloaded again", r.URL)
		}
	}
	if prog.starts != 1 {
		t.Errorf("a fetch with nothing to do started a progress step")
	}
}

func TestWrongSHA256(t *testing.T) {
	good := []byte("the real content\n")
	_, ts := newServer(t, map[string][]byte{"/os.img": good})
	store, _ := cas.Open(t.TempDir())
	wrong := digest([]byte("what the bundle pins"))
	url := ts.URL + "/os.img"
	_, err := (&Fetcher{Store: store}).Fetch(context.Background(), []Item{{URL: url, SHA256: wrong}})
	var me *MismatchError
	if !errors.As(err, &me) {
		t.Fatalf("got %v", err)
	}
	msg := err.Error()
	for _, want := range []string{url, wrong.Hex(), digest(good).Hex(), "expected", "got"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
	// Nothing bad is cached, and no partial is left to be resumed.
	if store.Has(digest(good)) || store.Has(wrong) {
		t.Error("the bad download entered the cache")
	}
	left, _ := filepath.Glob(filepath.Join(store.Root, "downloads", "*"))
	blobs, _ := filepath.Glob(filepath.Join(store.Root, "blobs", "sha256", "*"))
	if len(left) != 0 || len(blobs) != 0 {
		t.Errorf("left behind: %v %v", left, blobs)
	}
}

func TestResumeAfterInterruption(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 64*1024) // 1 MiB
	s, ts := newServer(t, map[string][]byte{"/big.img": data})
	s.cut["/big.img"] = true
	store, _ := cas.Open(t.TempDir())
	f := &Fetcher{Store: store}
	item := Item{URL: ts.URL + "/big.img", SHA256: digest(data), Size: int64(len(data))}
	if _, err := f.Fetch(context.Background(), []Item{item}); err == nil {
		t.Fatal("the cut download succeeded")
	}
	if store.Has(item.SHA256) {
		t.Fatal("a half download entered the cache")
	}
	part := filepath.Join(store.Root, "downloads", item.SHA256.Hex()+".part")
	fi, err := os.Stat(part)
	if err != nil || fi.Size() == 0 {
		t.Fatalf("no partial download kept: %v", err)
	}
	res, err := f.Fetch(context.Background(), []Item{item})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Resumed != fi.Size() || len(s.ranges["/big.img"]) != 1 {
		t.Errorf("resumed %d bytes (partial had %d), ranges %v", res[0].Resumed, fi.Size(), s.ranges)
	}
	if err := store.Verify(item.SHA256); err != nil {
		t.Error(err)
	}
}

func TestTrustOnFirstUseAndErrors(t *testing.T) {
	data := []byte("unpinned")
	_, ts := newServer(t, map[string][]byte{"/a": data})
	store, _ := cas.Open(t.TempDir())
	f := &Fetcher{Store: store}
	res, err := f.Fetch(context.Background(), []Item{{URL: ts.URL + "/a"}})
	if err != nil || res[0].SHA256 != digest(data) || res[0].Size != int64(len(data)) {
		t.Fatalf("%+v %v", res, err)
	}
	_, err = f.Fetch(context.Background(), []Item{{URL: ts.URL + "/missing", SHA256: digest([]byte("x"))}})
	if err == nil || !strings.Contains(err.Error(), ts.URL+"/missing") || !strings.Contains(err.Error(), "404") {
		t.Errorf("got %v", err)
	}
}
