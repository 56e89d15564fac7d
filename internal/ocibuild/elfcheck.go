package ocibuild

import (
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// libDirs are where the dynamic loader of a Debian amd64 system looks.
var libDirs = []string{
	"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
	"/lib64", "/usr/lib64", "/lib", "/usr/lib",
}

// MissingLibsError lists what dynamically linked executables in a tree need
// and cannot find in it.
type MissingLibsError struct {
	Missing map[string][]string // file in the tree -> missing libraries
}

func (e *MissingLibsError) Error() string {
	files := make([]string, 0, len(e.Missing))
	for f := range e.Missing {
		files = append(files, f)
	}
	sort.Strings(files)
	var b strings.Builder
	b.WriteString("shared libraries missing from the image:")
	for _, f := range files {
		fmt.Fprintf(&b, "\n  %s needs %s", f, strings.Join(e.Missing[f], ", "))
	}
	return b.String()
}

// CheckSharedLibs checks that every ELF file under root finds its program
// interpreter and every library it needs (DT_NEEDED) inside root, in its
// RUNPATH or the system folders, with symlinks resolved inside root. Static
// files need nothing.
func CheckSharedLibs(root string) error {
	missing := map[string][]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		f, err := elf.Open(p)
		if err != nil {
			return nil // not an ELF file
		}
		defer f.Close()
		r, _ := filepath.Rel(root, p) // p is below root
		rel := "/" + filepath.ToSlash(r)
		var needs []string
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP {
				b := make([]byte, prog.Filesz)
				if _, err := prog.ReadAt(b, 0); err == nil {
					interp := strings.TrimRight(string(b), "\x00")
					if !existsIn(root, interp) {
						needs = append(needs, interp)
					}
				}
			}
		}
		libs, err := f.ImportedLibraries()
		if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
			return fmt.Errorf("reading %s: %w", rel, err)
		}
		// RUNPATH (or the older RPATH) folders come first; $ORIGIN is the
		// file's own folder.
		var search []string
		for _, tag := range []elf.DynTag{elf.DT_RUNPATH, elf.DT_RPATH} {
			paths, _ := f.DynString(tag)
			for _, p := range paths {
				for _, d := range strings.Split(p, ":") {
					d = strings.ReplaceAll(strings.ReplaceAll(d, "${ORIGIN}", "$ORIGIN"), "$ORIGIN", path.Dir(rel))
					search = append(search, d)
				}
			}
		}
		for _, lib := range libs {
			if !findLib(root, lib, search) {
				needs = append(needs, lib)
			}
		}
		if len(needs) > 0 {
			missing[rel] = needs
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("checking shared libraries under %s: %w", root, err)
	}
	if len(missing) > 0 {
		return &MissingLibsError{Missing: missing}
	}
	return nil
}

func findLib(root, lib string, runpath []string) bool {
	if strings.Contains(lib, "/") {
		return existsIn(root, lib)
	}
	for _, d := range append(runpath, libDirs...) {
		if existsIn(root, path.Join(d, lib)) {
			return true
		}
	}
	return false
}

// existsIn reports whether the absolute path p exists inside root,
// following symlinks as the image would see them (absolute targets are
// relative to root).
func existsIn(root, p string) bool {
	p = path.Clean("/" + p)
	for hops := 0; hops < 40; hops++ {
		resolved, ok := resolveOnce(root, p)
		if !ok {
			return false
		}
		if resolved == p {
			return true
		}
		p = resolved
	}
	return false
}

// resolveOnce follows the first symlink among p's components; it returns p
// unchanged when no component is a symlink and p exists.
func resolveOnce(root, p string) (string, bool) {
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	cur := "/"
	for i, part := range parts {
		next := path.Join(cur, part)
		fi, err := os.Lstat(filepath.Join(root, filepath.FromSlash(next)))
		if err != nil {
			return "", false
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			t, err := os.Readlink(filepath.Join(root, filepath.FromSlash(next)))
			if err != nil {
				return "", false
			}
			if !path.IsAbs(t) {
				t = path.Join(cur, t)
			}
			return path.Clean(path.Join(append([]string{t}, parts[i+1:]...)...)), true
		}
		cur = next
	}
	return cur, true
}
