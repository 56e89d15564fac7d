package render

import (
	"io"
	"testing"

	"github.com/bootstick/bootstick/internal/site"
)

// BenchmarkValidateRender100 loads, validates and renders a 100-host site
// and writes it as YAML.
func BenchmarkValidateRender100(b *testing.B) {
	data := []byte(siteYAML("bench", "b", 100, 1))
	key := testKey(b)
	b.ReportAllocs()
	for b.Loop() {
		s, err := site.Parse("gen/site.yaml", data, site.Options{})
		if err != nil {
			b.Fatal(err)
		}
		objs, err := Render(s, Options{SSHKey: key})
		if err != nil {
			b.Fatal(err)
		}
		if err := WriteYAML(io.Discard, objs, false); err != nil {
			b.Fatal(err)
		}
	}
}
