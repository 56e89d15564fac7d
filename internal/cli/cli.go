// Package cli is the small subcommand frame both mains share: a registry of
// commands, each with its own flag set, a slog logger on stderr, and exit
// codes decided in one place.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/bootstick/bootstick/internal/logctx"

	"github.com/bootstick/bootstick/internal/progress"
)

// Command is one subcommand.
type Command struct {
	Name  string
	Usage string // one line: "build [--bundle F] [--output F]"
	Short string // what it does, one line
	// Flags declares the command's flags on fs and returns the function that
	// runs it with the remaining arguments.
	Flags func(fs *flag.FlagSet) func(ctx context.Context, args []string) error
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
}

// Register adds a command. It panics on a duplicate name: a programming error.
func (a *App) Register(c Command) {
	if a.commands == nil {
		a.commands = map[string]Command{}
	}
	if _, dup := a.commands[c.Name]; dup {
		panic("cli: duplicate command " + c.Name)
	}
	a.commands[c.Name] = c
}

// Main runs the program and exits.
// stderrFile is the process's stderr, as Main hands it to Run.
var stderrFile io.Writer = os.Stderr

func (a *App) Main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := a.Run(ctx, os.Args[1:], stderrFile)
	stop()
	os.Exit(code)
}

// Run runs the command named by args[0] and returns the exit code: 0 on
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

	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		a.usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := a.commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "%s: unknown command %q\n\n", a.Name, args[0])
		a.usage(stderr)
		return 2
	}
	fs := flag.NewFlagSet(a.Name+" "+c.Name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: %s %s\n\n%s\n\nflags:\n", a.Name, c.Usage, c.Short)
		fs.PrintDefaults()
	}
	run := c.Flags(fs)
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	err := run(logctx.With(ctx, slog.Default()), fs.Args())
	if err == nil {
		return 0
	}
	msg := fmt.Sprintf("%s %s: %v\n", a.Name, c.Name, err)
	if journal {
		// Every line of a many-line error (a site's problems) is an error.
		msg = strings.ReplaceAll(msg[:len(msg)-1], "\n", fmt.Sprintf("\n<%d>", prioErr))
		msg = fmt.Sprintf("<%d>%s\n", prioErr, msg)
	}
	io.WriteString(stderr, msg)
	var ue *UsageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "usage: %s %s\n", a.Name, c.Usage)
		return 2
	}
	var ec ExitCoder
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	return 1
}

func (a *App) usage(w io.Writer) {
	fmt.Fprintf(w, "%s: %s\n\ncommands:\n", a.Name, a.Short)
	names := make([]string, 0, len(a.commands))
	for n := range a.commands {
		names = append(names, n)
	}
	sort.Strings(names)
	width := 0
	for _, n := range names {
		width = max(width, len(n))
	}
	for _, n := range names {
		fmt.Fprintf(w, "  %-*s  %s\n", width, n, a.commands[n].Short)
	}
	fmt.Fprintf(w, "\nRun '%s COMMAND -h' for a command's flags.\n", a.Name)
}

// NoArgs returns a usage error when args is not empty.
func NoArgs(args []string) error {
	if len(args) > 0 {
		return Usagef("unexpected arguments: %s", strings.Join(args, " "))
	}
	return nil
}
