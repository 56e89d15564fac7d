package toolchain

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/command"
	"github.com/bootstick/bootstick/internal/gobuild"
)

// hashRepoDeps hashes the source folders of every package of the module
// that dir belongs to which pkgs (relative to dir) import, as `go list
// -deps` resolves them with the build's settings. Packages of other
// modules are pinned by go.sum, which hashLocal covers.
func hashRepoDeps(ctx context.Context, goCmd, dir string, pkgs []string) (map[string]string, error) {
	root, err := moduleRoot(dir)
	if err != nil {
		return nil, err
	}
	args := append([]string{goCmd, "list", "-deps", "-f", "{{if not .Standard}}{{.Dir}}{{end}}"}, pkgs...)
	out, err := command.Output(ctx, command.Options{Dir: dir, Env: append(os.Environ(), gobuild.Env()...)}, args...)
	if err != nil {
		return nil, fmt.Errorf("listing what %s imports: %w", strings.Join(pkgs, " "), err)
	}
	hashes := map[string]string{}
	for _, d := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(root, d)
		if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			continue // another module's
		}
		entries, err := os.ReadDir(d)
		if err != nil {
			return nil, fmt.Errorf("hashing %s: %w", d, err)
		}
		files := map[string]string{}
		for _, e := range entries {
			if !e.Type().IsRegular() {
				continue
			}
			b, err := os.ReadFile(filepath.Join(d, e.Name()))
			if err != nil {
				return nil, fmt.Errorf("hashing %s: %w", d, err)
			}
			files[e.Name()], _ = cas.Key(b)
		}
		if hashes[rel], err = cas.Key(files); err != nil {
			return nil, err
		}
	}
	return hashes, nil
}

// moduleRoot is the folder of the go.mod that dir belongs to.
func moduleRoot(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for d := abs; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if d == filepath.Dir(d) {
			return "", fmt.Errorf("%s is in no Go module", dir)
		}
	}
}

// hashLocal hashes the files of a local package folder and the go.mod and
// go.sum of the module it belongs to (it builds with them).
func hashLocal(dir string) (string, error) {
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		files[rel], _ = cas.Key(b)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("hashing %s: %w", dir, err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for d := abs; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			for _, f := range []string{"go.mod", "go.sum"} {
				if b, err := os.ReadFile(filepath.Join(d, f)); err == nil {
					files["module:"+f], _ = cas.Key(b)
				}
			}
			break
		}
		if d == filepath.Dir(d) {
			break
		}
	}
	return cas.Key(files)
}
