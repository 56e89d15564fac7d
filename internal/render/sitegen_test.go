package render

import (
	"testing"

	"github.com/bootstick/bootstick/internal/site"
	"github.com/bootstick/bootstick/internal/testkit"
)

var siteYAML = testkit.SiteYAML

func renderSite(t testing.TB, data string) []Object {
	t.Helper()
	s, err := site.Parse("gen/site.yaml", []byte(data), site.Options{})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Render(s, Options{SSHKey: testKey(t)})
	if err != nil {
		t.Fatal(err)
	}
	return objs
}
