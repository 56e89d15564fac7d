package firstboot

import (
	"os/exec"
	"strings"
	"testing"
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
		out, err := exec.Command("go", "list", "-tags", c.tags, "-f", "{{join .GoFiles \" \"}}", ".").CombinedOutput()
		if err != nil {
			t.Fatalf("go list: %v\n%s", err, out)
		}
		if got := strings.Contains(string(out), "testhook.go"); got != c.want {
			t.Errorf("tags %q: testhook.go compiled in = %v, want %v (files: %s)", c.tags, got, c.want, out)
		}
	}
}
