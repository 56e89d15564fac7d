package site_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bootstick/bootstick/internal/render"
	"github.com/bootstick/bootstick/internal/site"
	"github.com/bootstick/bootstick/internal/sshkeys"
)

// FuzzLoad feeds the loader arbitrary bytes: it must never panic, and a
// site it accepts must render.
func FuzzLoad(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/bad/*.yaml")
	seeds = append(seeds, "testdata/good.yaml", "../../examples/site.yaml")
	for _, s := range seeds {
		b, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	key, err := sshkeys.Generate(nil)
	if err != nil {
		f.Fatal(err)
	}
	images := []site.BundledImage{{Name: "ubuntu-22.04", File: "u.qcow2", SHA256: strings.Repeat("0", 64)}}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := site.Parse("testdata/fuzz.yaml", data, site.Options{BundledImages: images})
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		if _, err := render.Render(s, render.Options{SSHKey: key, Images: images}); err != nil {
			t.Fatalf("a valid site does not render: %v", err)
		}
	})
}
