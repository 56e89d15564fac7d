// Package sitestore keeps the site that `firstboot site apply` applied on
// the data disk, with the files it names beside it (credentials files,
// the BMC CA), so that a later firstboot run uses it instead of the
// stick's. A save is all or nothing: each version is a folder of its own,
// written whole before a symbolic link, replaced by a rename, makes it the
// current one; a crash leaves the old site or the new one, never a mix.
// Every folder is 0700 and every file 0600: the files may carry BMC
// passwords.
package sitestore

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/bootstick/bootstick/internal/atomicfile"
)

const (
	// current links to the folder of the site in use.
	current = "current"
	// SiteFile is the site's name in its folder.
	SiteFile = "site.yaml"
	// versionPrefix begins the name of each kept version's folder.
	versionPrefix = "site-"
	// tmpPrefix begins the names of what a save makes before its rename.
	tmpPrefix = ".new-"
)

// Beside reports whether a file a site names (rel, as written) is in the
// site's folder or below it, where Save can keep it: not an absolute
// path, not above the folder, and not the site file itself.
func Beside(rel string) bool {
	rel = filepath.Clean(rel)
	return !filepath.IsAbs(rel) && rel != ".." && !strings.HasPrefix(rel, "../") && rel != SiteFile && rel != "."
}

// Path is the kept site file under dir, or "" when none is kept.
func Path(dir string) (string, error) {
	p := filepath.Join(dir, current, SiteFile)
	if _, err := os.Stat(p); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", nil
		}
		return "", fmt.Errorf("reading the kept site: %w", err)
	}
	return p, nil
}

// Save keeps sitePath, and files (named relative to its folder, as the
// site names them), under dir as the current site, and returns the kept
// site's path (the same for every save: dir/current/site.yaml). A file
// named by an absolute path or outside the site's folder is refused
// before anything is written: the copy must carry it.
func Save(dir, sitePath string, files []string) (string, error) {
	type file struct {
		rel  string
		data []byte
	}
	site, err := os.ReadFile(sitePath)
	if err != nil {
		return "", fmt.Errorf("reading site %s: %w", sitePath, err)
	}
	all := []file{{SiteFile, site}}
	for _, f := range files {
		rel := filepath.Clean(f)
		if !Beside(f) {
			return "", fmt.Errorf("site %s names %s, which is not beside it: keep the files a site names (credentials, the BMC CA) in its folder", sitePath, f)
		}
		src := filepath.Join(filepath.Dir(sitePath), rel)
		data, err := os.ReadFile(src)
		if err != nil {
			return "", fmt.Errorf("reading %s, which site %s names: %w", src, sitePath, err)
		}
		all = append(all, file{rel, data})
	}
	h := sha256.New()
	for _, f := range all {
		fmt.Fprintf(h, "%s\x00%d\x00", f.rel, len(f.data))
		h.Write(f.data)
	}
	version := versionPrefix + hex.EncodeToString(h.Sum(nil))[:16]

	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("keeping the site: %w", err)
	}
	if _, err := os.Stat(filepath.Join(dir, version, SiteFile)); err != nil {
		// A version folder is renamed into place whole: one that is there
		// is complete, and holds these very bytes.
		tmp, err := os.MkdirTemp(dir, tmpPrefix)
		if err != nil {
			return "", fmt.Errorf("keeping the site: %w", err)
		}
		defer os.RemoveAll(tmp) // gone after the rename
		for _, f := range all {
			dst := filepath.Join(tmp, f.rel)
			if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
				return "", fmt.Errorf("keeping the site: %w", err)
			}
			if err := atomicfile.Write(dst, f.data, 0o600); err != nil {
				return "", fmt.Errorf("keeping the site: %w", err)
			}
		}
		if err := os.RemoveAll(filepath.Join(dir, version)); err != nil {
			return "", fmt.Errorf("keeping the site: %w", err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, version)); err != nil {
			return "", fmt.Errorf("keeping the site: %w", err)
		}
	}
	// Make it current: a new link renamed over the old one.
	link := filepath.Join(dir, tmpPrefix+"link-"+version)
	os.Remove(link)
	if err := os.Symlink(version, link); err != nil {
		return "", fmt.Errorf("keeping the site: %w", err)
	}
	if err := os.Rename(link, filepath.Join(dir, current)); err != nil {
		os.Remove(link)
		return "", fmt.Errorf("keeping the site: %w", err)
	}
	if err := atomicfile.SyncDir(dir); err != nil {
		return "", fmt.Errorf("keeping the site: %w", err)
	}
	// The older versions, and what a save cut short left, go.
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("keeping the site: %w", err)
	}
	for _, e := range entries {
		if n := e.Name(); n != version && (strings.HasPrefix(n, versionPrefix) || strings.HasPrefix(n, tmpPrefix)) {
			if err := os.RemoveAll(filepath.Join(dir, n)); err != nil {
				return "", fmt.Errorf("removing an older kept site: %w", err)
			}
		}
	}
	return filepath.Join(dir, current, SiteFile), nil
}
