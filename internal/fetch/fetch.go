// Package fetch downloads files by URL into the content-addressed cache with
// grab: in parallel, resuming a partial download where it stopped, and
// checking each file's sha256 before it enters the cache. A file whose
// sha256 is already in the cache is not downloaded at all.
//
// Partial downloads live in <cache>/downloads (not the cache's tmp folder,
// which every build clears), named by the digest they should have, so an
// interrupted build resumes them.
package fetch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/cavaliergopher/grab/v3"
	"golang.org/x/sync/errgroup"

	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/progress"
)

// Item is one file to fetch.
type Item struct {
	URL string
	// SHA256 is the expected digest; empty fetches and reports it (trust on
	// first use, for resolving a bundle into its lock).
	SHA256 cas.Digest
	// Size is the expected size when known (for the progress bar).
	Size int64
}

// Result is a fetched file, in the cache.
type Result struct {
	URL    string
	SHA256 cas.Digest
	Size   int64
	// Downloaded is false when the file was in the cache already.
	Downloaded bool
	// Resumed is how many bytes came from an earlier partial download.
	Resumed int64
}

// Fetcher downloads into a cache.
type Fetcher struct {
	Store *cas.Store
	// Workers is how many downloads run at once; default 4.
	Workers int
	// Progress gets one step for the whole batch; nil means none.
	Progress progress.Progress
	// Client is the HTTP client; nil means grab's default.
	Client *http.Client
}

// MismatchError is a download whose content does not have the pinned
// sha256. Nothing of it is kept.
type MismatchError struct {
	URL           string
	Expected, Got cas.Digest
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("fetching %s: sha256 mismatch: expected %s, got %s (the file changed upstream, or the bundle pins the wrong sha256; nothing was cached)", e.URL, e.Expected.Hex(), e.Got.Hex())
}

func (f *Fetcher) partialDir() string { return filepath.Join(f.Store.Root, "downloads") }

// Fetch downloads every item that is not in the cache, at most Workers at
// a time. A failed download does not stop the others: what finishes is
// cached, what is cut off stays as a partial download that the next run
// resumes. Every failure is reported.
func (f *Fetcher) Fetch(ctx context.Context, items []Item) ([]Result, error) {
	p := f.Progress
	if p == nil {
		p = progress.Nop()
	}
	workers := f.Workers
	if workers <= 0 {
		workers = 4
	}
	if err := os.MkdirAll(f.partialDir(), 0o755); err != nil {
		return nil, fmt.Errorf("fetching: %w", err)
	}
	results := make([]Result, len(items))
	var todo []int
	var total int64
	for i, it := range items {
		if it.SHA256 != "" && f.Store.Has(it.SHA256) {
			fi, err := os.Stat(f.Store.BlobPath(it.SHA256))
			if err == nil {
				results[i] = Result{URL: it.URL, SHA256: it.SHA256, Size: fi.Size()}
				continue
			}
		}
		todo = append(todo, i)
		if it.Size > 0 && total >= 0 {
			total += it.Size
		} else {
			total = -1
		}
	}
	if len(todo) == 0 {
		return results, nil
	}
	p.Start(fmt.Sprintf("downloading %d files", len(todo)), total)
	defer p.Done()
	client := grab.NewClient()
	client.UserAgent = "bootstick-mkusb"
	if f.Client != nil {
		client.HTTPClient = f.Client
	}
	var g errgroup.Group
	g.SetLimit(workers)
	errs := make([]error, len(items))
	for _, i := range todo {
		g.Go(func() error {
			results[i], errs[i] = f.one(ctx, client, items[i], p)
			return nil
		})
	}
	g.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return results, nil
}

// partialName names the partial download: by its expected digest, else by
// the URL.
func partialName(it Item) string {
	if it.SHA256 != "" {
		return it.SHA256.Hex() + ".part"
	}
	s := sha256.Sum256([]byte(it.URL))
	return "url-" + hex.EncodeToString(s[:]) + ".part"
}

func (f *Fetcher) one(ctx context.Context, client *grab.Client, it Item, p progress.Progress) (Result, error) {
	part := filepath.Join(f.partialDir(), partialName(it))
	req, err := grab.NewRequest(part, it.URL)
	if err != nil {
		return Result{}, fmt.Errorf("fetching %s: %w", it.URL, err)
	}
	var before int64
	if fi, err := os.Stat(part); err == nil {
		before = fi.Size()
	}
	req = req.WithContext(ctx)
	req.Size = it.Size
	req.NoCreateDirectories = true
	resp := client.Do(req)
	var last int64
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	report := func() {
		n := resp.BytesComplete() - before
		if n > last {
			p.Add(n - last)
			last = n
		}
	}
loop:
	for {
		select {
		case <-tick.C:
			report()
		case <-resp.Done:
			report()
			break loop
		}
	}
	if err := resp.Err(); err != nil {
		if ctx.Err() != nil {
			return Result{}, fmt.Errorf("fetching %s: %w (the partial download is kept and resumes next time)", it.URL, ctx.Err())
		}
		if errors.Is(err, grab.ErrBadLength) {
			// The partial file is longer than the remote one: start over.
			os.Remove(part)
		}
		return Result{}, fmt.Errorf("fetching %s: %w", it.URL, err)
	}
	d, n, err := f.commit(part, it)
	if err != nil {
		return Result{}, err
	}
	r := Result{URL: it.URL, SHA256: d, Size: n, Downloaded: true}
	if resp.DidResume {
		r.Resumed = before
	}
	return r, nil
}

// commit hashes the finished download and moves it into the cache under
// its digest, or removes it when it is not what was pinned.
func (f *Fetcher) commit(part string, it Item) (cas.Digest, int64, error) {
	got, n, err := cas.HashFile(part)
	if err != nil {
		return "", 0, fmt.Errorf("fetching %s: reading the download: %w", it.URL, err)
	}
	if it.SHA256 != "" && got != it.SHA256 {
		os.Remove(part)
		return "", 0, &MismatchError{URL: it.URL, Expected: it.SHA256, Got: got}
	}
	if err := os.Chmod(part, 0o444); err != nil {
		return "", 0, fmt.Errorf("fetching %s: %w", it.URL, err)
	}
	if err := syncFile(part); err != nil {
		return "", 0, fmt.Errorf("fetching %s: %w", it.URL, err)
	}
	if err := os.Rename(part, f.Store.BlobPath(got)); err != nil {
		return "", 0, fmt.Errorf("fetching %s: storing it: %w", it.URL, err)
	}
	return got, n, syncFile(filepath.Dir(f.Store.BlobPath(got)))
}

func syncFile(p string) error {
	fh, err := os.Open(p)
	if err != nil {
		return err
	}
	defer fh.Close()
	return fh.Sync()
}
