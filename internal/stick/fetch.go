package stick

import (
	"context"
	"fmt"
	"os"

	"github.com/bootstick/bootstick/internal/bundle"
	"github.com/bootstick/bootstick/internal/debs"
	"github.com/bootstick/bootstick/internal/fetch"
)

// fetchAll puts every file and image of the lock into the cache.
func fetchAll(ctx context.Context, o Options, b *bundle.Bundle, l *bundle.Lock) error {
	var items []fetch.Item
	var locals []bundle.LockedFile
	for _, f := range append(append([]bundle.LockedFile(nil), l.Files...), l.Kubernetes.Binaries...) {
		switch f.Source {
		case bundle.SourceURL:
			items = append(items, fetch.Item{URL: f.URL, SHA256: f.SHA256, Size: f.Size})
		case bundle.SourceLocal:
			locals = append(locals, f)
		}
	}
	fr := &fetch.Fetcher{Store: o.Store, Progress: o.Progress, Client: o.HTTPClient}
	if _, err := fr.Fetch(ctx, items); err != nil {
		return err
	}
	for _, f := range locals {
		if err := storeFile(ctx, o, b, f); err != nil {
			return err
		}
	}
	var pkgs []debs.Package
	for _, d := range l.Packages.Debs {
		pkgs = append(pkgs, d.Package)
	}
	if len(pkgs) > 0 {
		work, err := o.Store.TempDir("debs-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(work)
		if err := o.FetchDebs(ctx, o.Store, pkgs, work); err != nil {
			return err
		}
	}
	for _, im := range l.Images {
		if im.Source != bundle.SourceRegistry {
			if !fetch.Complete(o.Store, im.Digest) {
				return fmt.Errorf("image %s (%s) is not in the cache: run mkusb toolchain", im.Ref, im.Digest)
			}
			continue
		}
		if _, err := fetch.PullImage(ctx, o.Store, im.Ref, im.Digest, o.RemoteOptions...); err != nil {
			return err
		}
	}
	return nil
}

// storeFile puts a pinned file the cache lacks into it: a release binary
// by its URL, or a file beside the bundle (the toolchain's are there).
func storeFile(ctx context.Context, o Options, b *bundle.Bundle, f bundle.LockedFile) error {
	if o.Store.Has(f.SHA256) {
		return nil
	}
	switch f.Source {
	case bundle.SourceURL:
		fr := &fetch.Fetcher{Store: o.Store, Progress: o.Progress, Client: o.HTTPClient}
		_, err := fr.Fetch(ctx, []fetch.Item{{URL: f.URL, SHA256: f.SHA256, Size: f.Size}})
		return err
	case bundle.SourceLocal:
		d, _, err := o.Store.PutFile(b.Path(f.Path))
		if err == nil && d != f.SHA256 {
			err = fmt.Errorf("%s changed since it was locked (sha256 %s, locked %s): build again without --locked to relock", f.Path, d.Hex(), f.SHA256.Hex())
		}
		return err
	}
	return fmt.Errorf("%s (%s) is not in the cache: run mkusb toolchain", f.Name, f.SHA256)
}
