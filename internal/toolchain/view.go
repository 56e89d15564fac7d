package toolchain

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/bootstick/bootstick/internal/atomicfile"
	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/ocibuild"
)

// writeView assembles bin/, oci/ and toolchain.json in a new folder named by
// their hash, then points toolchain/current at it.
func writeView(s *cas.Store, m Manifest, images []ocibuild.Image) (string, error) {
	mj, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return "", err
	}
	key, err := cas.Key(string(mj))
	if err != nil {
		return "", err
	}
	top := filepath.Join(s.Root, "toolchain")
	views := filepath.Join(top, "views")
	if err := os.MkdirAll(views, 0o755); err != nil {
		return "", fmt.Errorf("writing toolchain view: %w", err)
	}
	final := filepath.Join(views, key[:16])
	if _, err := os.Stat(filepath.Join(final, "toolchain.json")); err != nil {
		os.RemoveAll(final)
		tmp, err := os.MkdirTemp(views, ".tmp-")
		if err != nil {
			return "", fmt.Errorf("writing toolchain view: %w", err)
		}
		defer os.RemoveAll(tmp)
		if err := os.Mkdir(filepath.Join(tmp, "bin"), 0o755); err != nil {
			return "", err
		}
		for _, b := range m.Binaries {
			if err := s.Link(b.Digest, filepath.Join(tmp, "bin", b.Name)); err != nil {
				return "", fmt.Errorf("writing toolchain view: %w", err)
			}
		}
		if err := ocibuild.WriteLayout(s, filepath.Join(tmp, "oci"), images); err != nil {
			return "", err
		}
		if err := os.Mkdir(filepath.Join(tmp, "files"), 0o755); err != nil {
			return "", err
		}
		for _, a := range m.Artifacts {
			for _, f := range a.Files {
				if err := s.Link(f.Digest, filepath.Join(tmp, "files", f.Name)); err != nil {
					return "", fmt.Errorf("writing toolchain view: %w", err)
				}
			}
		}
		if err := atomicfile.Write(filepath.Join(tmp, "toolchain.json"), append(mj, '\n'), 0o644); err != nil {
			return "", err
		}
		if err := os.Rename(tmp, final); err != nil {
			return "", fmt.Errorf("writing toolchain view: %w", err)
		}
	}
	// Swap the current link atomically, then drop older views.
	link := filepath.Join(top, "current")
	tmpLink := link + ".tmp"
	os.Remove(tmpLink)
	if err := os.Symlink(filepath.Join("views", key[:16]), tmpLink); err != nil {
		return "", fmt.Errorf("writing toolchain view: %w", err)
	}
	if err := os.Rename(tmpLink, link); err != nil {
		return "", fmt.Errorf("writing toolchain view: %w", err)
	}
	entries, _ := os.ReadDir(views)
	for _, e := range entries {
		if e.Name() != key[:16] {
			os.RemoveAll(filepath.Join(views, e.Name()))
		}
	}
	return final, nil
}
