// Package cli is the subcommand frame both mains share, on cobra (the help,
// completion and flag conventions users of kind, talosctl and crane know):
// a registry of commands, each declaring its own flags, a slog logger on
// stderr carried in the context, a version command, and exit codes decided
// in one place. Flags may come before or after positional arguments.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/bootstick/bootstick/internal/logctx"
	"github.com/bootstick/bootstick/internal/progress"
)

// Command is one subcommand. A Name of two words ("site apply") is a
// subcommand of a group (RegisterGroup), and its Usage starts with both.
type Command struct {
	Name  string
	Usage string // one line: "build [--bundle F] [--output F]"
	Short string // what it does, one line
	// Flags declares the command's flags on fs and returns the function that
	// runs it with the positional arguments.
	Flags func(fs *pflag.FlagSet) func(ctx context.Context, args []string) error
}

// UsageError is returned for bad arguments: exit code 2.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// Usagef makes a UsageError.
func Usagef(format string, a ...any) error { return &UsageError{Msg: fmt.Sprintf(format, a...)} }

// ExitCoder lets an error choose the process exit code.
type ExitCoder interface{ ExitCode() int }

// App is a program with subcommands.
type App struct {
	Name     string
	Short    string
	commands map[string]Command
	groups   map[string]string // group name -> its one-line description
}

// Register adds a command. It panics on a duplicate name, or a command
// of a group not registered: programming errors.
func (a *App) Register(c Command) {
	if a.commands == nil {
		a.commands = map[string]Command{}
	}
	if _, dup := a.commands[c.Name]; dup || c.Name == "version" || a.groups[c.Name] != "" {
		panic("cli: duplicate command " + c.Name)
	}
	if g, _, nested := strings.Cut(c.Name, " "); nested && a.groups[g] == "" {
		panic("cli: command " + c.Name + " of a group not registered")
	}
	a.commands[c.Name] = c
}

// RegisterGroup adds a group of subcommands ("site" for "site apply"),
// before its commands are registered.
func (a *App) RegisterGroup(name, short string) {
	if a.groups == nil {
		a.groups = map[string]string{}
	}
	if _, dup := a.commands[name]; dup || a.groups[name] != "" || short == "" {
		panic("cli: duplicate or undescribed group " + name)
	}
	a.groups[name] = short
}

// stderrFile is the process's stderr, as Main hands it to Run.
var stderrFile io.Writer = os.Stderr

// Main runs the program and exits.
func (a *App) Main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := a.Run(ctx, os.Args[1:], stderrFile)
	stop()
	os.Exit(code)
}

// Run runs the command args names and returns the exit code: 0 on
// success, 2 for usage errors, the error's own code when it has one, else 1.
func (a *App) Run(ctx context.Context, args []string, stderr io.Writer) int {
	level := new(slog.LevelVar)
	if os.Getenv("BOOTSTICK_DEBUG") != "" {
		level.Set(slog.LevelDebug)
	}
	opts := &slog.HandlerOptions{Level: level}
	journal := stderrIsJournal(stderr)
	if journal {
		slog.SetDefault(slog.New(newPriorityHandler(stderr, opts)))
	} else {
		// Log lines go above a progress bar, never through it.
		slog.SetDefault(slog.New(slog.NewTextHandler(progress.LogWriter(stderr), opts)))
	}
	ctx = logctx.With(ctx, slog.Default())

	var failed *cobra.Command
	root := a.root(&failed)
	root.SetArgs(args)
	root.SetErr(stderr)
	root.SetOut(os.Stdout)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	if failed == nil || failed == root {
		// cobra's own errors: an unknown command or flag.
		fmt.Fprintf(stderr, "%s: %v\n", a.Name, err)
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", a.Name)
		return 2
	}
	// The command's name below the program: "apply" of "site apply".
	name := strings.TrimPrefix(failed.CommandPath(), root.Name()+" ")
	msg := fmt.Sprintf("%s %s: %v\n", a.Name, name, err)
	if journal {
		// Every line of a many-line error (a site's problems) is an error.
		msg = strings.ReplaceAll(msg[:len(msg)-1], "\n", fmt.Sprintf("\n<%d>", prioErr))
		msg = fmt.Sprintf("<%d>%s\n", prioErr, msg)
	}
	io.WriteString(stderr, msg)
	var ue *UsageError
	if errors.As(err, &ue) {
		usage := a.commands[name].Usage
		if usage == "" { // a group named with no or an unknown subcommand
			usage = name + " COMMAND"
		}
		fmt.Fprintf(stderr, "usage: %s %s\n", a.Name, usage)
		return 2
	}
	var ec ExitCoder
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	return 1
}

// root builds the cobra tree; failed is set to the command whose run
// returned an error.
func (a *App) root(failed **cobra.Command) *cobra.Command {
	root := &cobra.Command{Use: a.Name, Short: a.Short, SilenceErrors: true, SilenceUsage: true}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return Usagef("%v", err) })
	names := make([]string, 0, len(a.commands))
	for n := range a.commands {
		names = append(names, n)
	}
	sort.Strings(names)
	groups := map[string]*cobra.Command{}
	for _, g := range slices.Sorted(maps.Keys(a.groups)) {
		gc := &cobra.Command{Use: g + " COMMAND", Short: a.groups[g], SilenceErrors: true, SilenceUsage: true}
		gc.RunE = func(cmd *cobra.Command, args []string) error {
			*failed = cmd
			if len(args) == 0 {
				return Usagef("name a command of %s (%s %s --help lists them)", g, a.Name, g)
			}
			return Usagef("unknown command %q for %s (%s %s --help lists them)", args[0], g, a.Name, g)
		}
		groups[g] = gc
		root.AddCommand(gc)
	}
	for _, n := range names {
		c := a.commands[n]
		parent, use := root, c.Usage
		if g, sub, nested := strings.Cut(n, " "); nested {
			// cobra's Use starts with the command's own name.
			parent, use = groups[g], sub+strings.TrimPrefix(c.Usage, n)
		}
		cc := &cobra.Command{Use: use, Short: c.Short, SilenceErrors: true, SilenceUsage: true}
		run := c.Flags(cc.Flags())
		cc.RunE = func(cmd *cobra.Command, args []string) error {
			*failed = cmd
			return run(cmd.Context(), args)
		}
		cc.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
			*failed = cmd
			return Usagef("%v", err)
		})
		parent.AddCommand(cc)
	}
	root.AddCommand(a.versionCommand(failed))
	return root
}

// NoArgs returns a usage error when args is not empty.
func NoArgs(args []string) error {
	if len(args) > 0 {
		return Usagef("unexpected arguments: %s", strings.Join(args, " "))
	}
	return nil
}

// OneArg returns the single positional argument, or a usage error naming
// what is wanted.
func OneArg(args []string, what string) (string, error) {
	switch len(args) {
	case 0:
		return "", Usagef("name the %s", what)
	case 1:
		return args[0], nil
	}
	return "", Usagef("unexpected arguments: %s", strings.Join(args[1:], " "))
}
