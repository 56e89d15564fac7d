package sitestore

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Save keeps the site and its files whole, 0600 in 0700 folders; a new
// save replaces them and leaves one version; a save that cannot read a
// file, or is given one outside the site's folder, changes nothing.
func TestSave(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "site")
	if p, err := Path(dir); p != "" || err != nil {
		t.Fatalf("Path with nothing kept = %q, %v", p, err)
	}
	src := t.TempDir()
	site := filepath.Join(src, "site.yaml")
	write(t, site, "hosts: one\n")
	write(t, filepath.Join(src, "creds", "w.yaml"), "password: one\n")

	p, err := Save(dir, site, []string{"creds/w.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := Path(dir); got != p || p != filepath.Join(dir, "current", "site.yaml") {
		t.Fatalf("Save = %q, Path = %q", p, got)
	}
	if read(t, p) != "hosts: one\n" || read(t, filepath.Join(filepath.Dir(p), "creds", "w.yaml")) != "password: one\n" {
		t.Fatal("the kept site differs from the saved one")
	}
	err = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.Type()&os.ModeSymlink != 0 {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if want := os.FileMode(0o600); d.IsDir() && fi.Mode().Perm() != 0o700 || !d.IsDir() && fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v", path, fi.Mode().Perm())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// The same bytes again: the same version.
	versions := func() []string {
		t.Helper()
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range entries {
			out = append(out, e.Name())
		}
		return out
	}
	before := versions()
	if _, err := Save(dir, site, []string{"creds/w.yaml"}); err != nil {
		t.Fatal(err)
	}
	if strings.Join(versions(), " ") != strings.Join(before, " ") || len(before) != 2 {
		t.Fatalf("saving the same site again: %v, then %v", before, versions())
	}

	// Refused: nothing changes.
	write(t, filepath.Join(src, "site.yaml"), "hosts: two\n")
	for _, files := range [][]string{{"creds/missing.yaml"}, {"/etc/passwd"}, {"../x.yaml"}, {"creds/../../x.yaml"}} {
		if _, err := Save(dir, site, files); err == nil {
			t.Errorf("Save with %v succeeded", files)
		}
		if read(t, p) != "hosts: one\n" || strings.Join(versions(), " ") != strings.Join(before, " ") {
			t.Fatalf("a refused save (%v) changed the kept site: %v", files, versions())
		}
	}

	// A new site replaces the old one, which goes, with a file it no
	// longer names.
	if _, err := Save(dir, site, nil); err != nil {
		t.Fatal(err)
	}
	if read(t, p) != "hosts: two\n" {
		t.Fatal("the new site is not the kept one")
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(p), "creds")); !os.IsNotExist(err) {
		t.Errorf("the old version's file is still there: %v", err)
	}
	if v := versions(); len(v) != 2 {
		t.Errorf("folder holds %v, want the link and one version", v)
	}
}
