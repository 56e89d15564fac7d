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

// A command of a group ("grp sub") runs under the group, names itself
// with the group in its errors and usage, and a group named alone or with
// an unknown command is a usage error.
func TestGroupCommands(t *testing.T) {
	var got []string
	a := &App{Name: "prog", Short: "a test program"}
	a.RegisterGroup("grp", "a group")
	a.Register(Command{Name: "grp sub", Usage: "grp sub --x N [FILE]", Short: "a command of grp",
		Flags: func(fs *pflag.FlagSet) func(context.Context, []string) error {
			x := fs.String("x", "", "a flag")
			return func(ctx context.Context, args []string) error {
				got = append(args, *x)
				switch {
				case *x == "usage":
					return Usagef("bad")
				case *x == "fail":
					return errors.New("it failed")
				}
				return nil
			}
		}})
	for _, c := range []struct {
		args   []string
		code   int
		stderr []string
	}{
		{args: []string{"grp", "sub", "f", "--x", "1"}, code: 0},
		{args: []string{"grp", "sub", "--x", "fail"}, code: 1, stderr: []string{"prog grp sub: it failed"}},
		{args: []string{"grp", "sub", "--x", "usage"}, code: 2, stderr: []string{"prog grp sub: bad", "usage: prog grp sub --x N [FILE]"}},
		{args: []string{"grp", "sub", "--nope"}, code: 2, stderr: []string{"prog grp sub: unknown flag: --nope", "usage: prog grp sub --x N"}},
		{args: []string{"grp"}, code: 2, stderr: []string{"prog grp: name a command of grp", "usage: prog grp COMMAND"}},
		{args: []string{"grp", "nope"}, code: 2, stderr: []string{`prog grp: unknown command "nope" for grp`}},
	} {
		got = nil
		var stderr bytes.Buffer
		code := a.Run(context.Background(), c.args, &stderr)
		if code != c.code {
			t.Errorf("%v: code %d, want %d; stderr %q", c.args, code, c.code, stderr.String())
		}
		for _, w := range c.stderr {
			if !strings.Contains(stderr.String(), w) {
				t.Errorf("%v: stderr %q lacks %q", c.args, stderr.String(), w)
			}
		}
	}
	if code := a.Run(context.Background(), []string{"grp", "sub", "f", "--x", "1"}, &bytes.Buffer{}); code != 0 || strings.Join(got, ",") != "f,1" {
		t.Errorf("grp sub f --x 1: code %d, args %v", code, got)
	}
}
