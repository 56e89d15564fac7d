package cli

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

type exitErr struct{}

func (exitErr) Error() string { return "three" }
func (exitErr) ExitCode() int { return 3 }

func testApp(got *[]string, name *string) *App {
	a := &App{Name: "prog", Short: "a test program"}
	a.Register(Command{Name: "echo", Usage: "echo ARG... [--name N]", Short: "echo",
		Flags: func(fs *pflag.FlagSet) func(context.Context, []string) error {
			n := fs.String("name", "", "a name")
			return func(ctx context.Context, args []string) error {
				*got, *name = args, *n
				switch {
				case len(args) > 0 && args[0] == "usage":
					return Usagef("bad")
				case len(args) > 0 && args[0] == "three":
					return exitErr{}
				case len(args) > 0 && args[0] == "fail":
					return errors.New("it failed")
				}
				return nil
			}
		}})
	return a
}

func TestRunExitCodesAndFlagsAfterArguments(t *testing.T) {
	var got []string
	var name string
	cases := []struct {
		args     []string
		code     int
		wantArgs []string
		wantName string
		stderr   string
	}{
		{args: []string{"echo", "a", "--name", "x", "b"}, code: 0, wantArgs: []string{"a", "b"}, wantName: "x"},
		{args: []string{"echo", "--name=y", "a"}, code: 0, wantArgs: []string{"a"}, wantName: "y"},
		{args: []string{"echo", "usage"}, code: 2, stderr: "usage: prog echo ARG..."},
		{args: []string{"echo", "three"}, code: 3, stderr: "prog echo: three"},
		{args: []string{"echo", "fail"}, code: 1, stderr: "prog echo: it failed"},
		{args: []string{"echo", "--nope"}, code: 2, stderr: "unknown flag: --nope"},
		{args: []string{"nope"}, code: 2, stderr: `unknown command "nope"`},
	}
	for _, c := range cases {
		got, name = nil, ""
		var stderr bytes.Buffer
		code := testApp(&got, &name).Run(context.Background(), c.args, &stderr)
		if code != c.code || !strings.Contains(stderr.String(), c.stderr) {
			t.Errorf("%v: code %d, stderr %q; want %d and %q", c.args, code, stderr.String(), c.code, c.stderr)
		}
		if c.wantArgs != nil && (strings.Join(got, ",") != strings.Join(c.wantArgs, ",") || name != c.wantName) {
			t.Errorf("%v: args %v name %q; want %v %q", c.args, got, name, c.wantArgs, c.wantName)
		}
	}
}

func TestVersion(t *testing.T) {
	v := Info("prog")
	if v.Program != "prog" || v.Version == "" || !strings.HasPrefix(v.Go, "go") {
		t.Errorf("Info = %+v", v)
	}
	var got []string
	var name string
	var stderr bytes.Buffer
	if code := testApp(&got, &name).Run(context.Background(), []string{"version", "--json"}, &stderr); code != 0 {
		t.Errorf("version --json: code %d: %s", code, stderr.String())
	}
}
