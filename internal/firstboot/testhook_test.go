package firstboot

import (
	"context"
	"strings"
	"testing"

	"github.com/bootstick/bootstick/internal/command"
)

// The release binary carries no test hook: the pause variable's name is
// not in it, and it is in a binary built with the bootsticktest tag.
func TestReleaseBinaryHasNoTestHook(t *testing.T) {
	if testing.Short() {
		t.Skip("builds firstboot twice")
	}
	for _, c := range []struct {
		tags string
		want bool
	}{{"", false}, {"bootsticktest", true}} {
		out, err := command.Output(context.Background(), command.Options{}, "go", "list", "-tags", c.tags, "-f", "{{join .GoFiles \" \"}}", ".")
		if err != nil {
			t.Fatalf("go list: %v", err)
		}
		if got := strings.Contains(string(out), "testhook.go"); got != c.want {
			t.Errorf("tags %q: testhook.go compiled in = %v, want %v (files: %s)", c.tags, got, c.want, out)
		}
	}
}
