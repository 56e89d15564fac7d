// Package debs takes Debian packages into the content-addressed cache and
// unpacks them. Versions and checksums come from this machine's apt lists,
// and downloads go through its own apt configuration (so its mirror), so no
// mirror is named here. A package already in the cache is not downloaded
// again.
package debs

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/bootstick/bootstick/internal/command"

	"github.com/bootstick/bootstick/internal/cas"
)

// Package is one resolved Debian package.
type Package struct {
	Name    string     `json:"name"`
	Version string     `json:"version"`
	Arch    string     `json:"arch"`
	SHA256  cas.Digest `json:"sha256"`
	// Suite is the suite that serves Version (e.g. trixie-security), and
	// Source the source package where its name differs: both where the
	// package was resolved from a suite and its updates (Apt).
	Suite  string `json:"suite,omitempty"`
	Source string `json:"source,omitempty"`
}

func (p Package) String() string { return p.Name + "=" + p.Version }

// Resolve finds the candidate version of each package in this machine's
// apt lists.
func Resolve(ctx context.Context, names []string) ([]Package, error) {
	return resolve(ctx, nil, names, false)
}

// resolve reads the candidates' fields; withSource keeps each one's
// source package.
func resolve(ctx context.Context, aptOpts []string, names []string, withSource bool) ([]Package, error) {
	if len(names) == 0 {
		return nil, nil
	}
	args := append(append(append([]string{"apt-cache"}, aptOpts...), "show", "--no-all-versions"), names...)
	stdout, err := command.Output(ctx, command.Options{}, args...)
	if err != nil {
		return nil, fmt.Errorf("resolving Debian packages %s (run apt-get update, and check the names): %w", strings.Join(names, " "), err)
	}
	out := bytes.NewBuffer(stdout)
	found := map[string]Package{}
	for _, para := range strings.Split(out.String(), "\n\n") {
		fields := map[string]string{}
		sc := bufio.NewScanner(strings.NewReader(para))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ": "); ok && !strings.HasPrefix(k, " ") {
				fields[k] = v
			}
		}
		if fields["Package"] == "" {
			continue
		}
		d, err := cas.ParseDigest("sha256:" + fields["SHA256"])
		if err != nil {
			return nil, fmt.Errorf("Debian package %s: apt lists give no usable SHA256: %w", fields["Package"], err)
		}
		p := Package{Name: fields["Package"], Version: fields["Version"], Arch: fields["Architecture"], SHA256: d}
		if withSource {
			// "Source: name (version)" when the binary's version differs.
			p.Source, _, _ = strings.Cut(fields["Source"], " ")
		}
		found[p.Name] = p
	}
	pkgs := make([]Package, 0, len(names))
	for _, n := range names {
		p, ok := found[n]
		if !ok {
			return nil, fmt.Errorf("Debian package %s is not in this machine's apt lists: run apt-get update, or check the name", n)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs, nil
}

// Fetch makes sure each package's .deb is in the store, downloading the
// ones that are not with apt-get into workDir.
func Fetch(ctx context.Context, store *cas.Store, pkgs []Package, workDir string) error {
	return fetch(ctx, nil, store, pkgs, workDir)
}

func fetch(ctx context.Context, aptOpts []string, store *cas.Store, pkgs []Package, workDir string) error {
	var want []string
	for _, p := range pkgs {
		if !store.Has(p.SHA256) {
			want = append(want, p.String())
		}
	}
	if len(want) == 0 {
		return nil
	}
	if _, err := command.Run(ctx, command.Options{Dir: workDir}, append(append(append([]string{"apt-get"}, aptOpts...), "download", "-q"), want...)...); err != nil {
		return fmt.Errorf("downloading Debian packages: %w", err)
	}
	for _, p := range pkgs {
		if store.Has(p.SHA256) {
			continue
		}
		matches, _ := filepath.Glob(filepath.Join(workDir, p.Name+"_*.deb"))
		if len(matches) != 1 {
			return fmt.Errorf("downloading Debian package %s: apt-get wrote %d files for it", p, len(matches))
		}
		f, err := os.Open(matches[0])
		if err != nil {
			return fmt.Errorf("reading %s: %w", matches[0], err)
		}
		_, _, err = store.Put(f, p.SHA256)
		f.Close()
		if err != nil {
			return fmt.Errorf("Debian package %s from %s: %w", p, filepath.Base(matches[0]), err)
		}
	}
	return nil
}

// Extract unpacks each package's files (not its maintainer scripts) into
// dir, in order.
func Extract(ctx context.Context, store *cas.Store, pkgs []Package, dir string) error {
	for _, p := range pkgs {
		if _, err := command.Run(ctx, command.Options{}, "dpkg-deb", "-x", store.BlobPath(p.SHA256), dir); err != nil {
			return fmt.Errorf("unpacking Debian package %s: %w", p, err)
		}
	}
	return nil
}
