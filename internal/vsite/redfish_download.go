package vsite

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
)

// defaultMaxImageBytes bounds a virtual media image, which the BMC keeps
// on the site's disk while it is inserted (a deploy ISO is some hundred
// MiB).
const defaultMaxImageBytes = 4 << 30

// download writes the image at rawURL to file, whole or not at all: an
// image larger than maxImageBytes is refused, whatever its
// Content-Length says (or when it has none). Its errors name the URL
// by its server and file name only: its user, query and folders may hold
// secrets (bootstick's Ironic serves the ISOs under a secret path).
func (b *redfishBMC) download(ctx context.Context, rawURL, file string) error {
	u, _ := url.Parse(rawURL)
	shown := (&url.URL{Scheme: u.Scheme, Host: u.Host}).String() + "/…/" + path.Base(u.Path)
	if err := b.fetchImage(ctx, rawURL, file); err != nil {
		return fmt.Errorf("fetching %s: %w", shown, err)
	}
	return nil
}

func (b *redfishBMC) fetchImage(ctx context.Context, rawURL, file string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return errors.New("not a valid request URL") // its error holds the URL
	}
	resp, err := b.fetch.Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // without the URL
		}
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return errors.New(resp.Status)
	}
	tooBig := fmt.Errorf("the image is larger than this BMC's limit of %s", byteSize(b.maxImageBytes))
	if resp.ContentLength > b.maxImageBytes {
		return tooBig
	}
	tmp, err := os.CreateTemp(b.mediaDir, b.name+".cd.*.part")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	// The byte past the limit, if it comes, tells a larger image.
	n, err := io.Copy(tmp, io.LimitReader(resp.Body, b.maxImageBytes+1))
	if err == nil && n > b.maxImageBytes {
		err = tooBig
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp.Name(), file)
}

// byteSize is n bytes for a person: in the largest binary unit that
// divides it ("4 GiB"), else in bytes.
func byteSize(n int64) string {
	for _, u := range []struct {
		name string
		size int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.size && n%u.size == 0 {
			return fmt.Sprintf("%d %s", n/u.size, u.name)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}
