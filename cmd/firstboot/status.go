package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/bootstick/bootstick/internal/cli"
	"github.com/bootstick/bootstick/internal/pipeline"
	"github.com/bootstick/bootstick/internal/status"
)

func init() {
	app.Register(cli.Command{
		Name:  "status",
		Usage: "status [--json] [--data DIR]",
		Short: "show each step's state and duration, and the last error with a hint",
		Flags: func(fs *flag.FlagSet) func(ctx context.Context, args []string) error {
			asJSON := fs.Bool("json", false, "print JSON")
			data := fs.String("data", "/var/lib/bootstick", "where persistent state lives")
			return func(ctx context.Context, args []string) error {
				if err := cli.NoArgs(args); err != nil {
					return err
				}
				r, err := buildStatus(defaultPaths(*data))
				if err != nil {
					return err
				}
				if *asJSON {
					return r.WriteJSON(os.Stdout)
				}
				return r.WriteText(os.Stdout)
			}
		},
	})
}

func buildStatus(p paths) (status.Report, error) {
	st, err := pipeline.LoadState(pipeline.StatePath(p.State))
	if err != nil {
		return status.Report{}, err
	}
	in := status.Input{State: st, Hints: stepHints}
	lock := pipeline.LockPath(p.State)
	if pipeline.Held(lock) {
		in.Running, in.HolderPID = true, pipeline.LockHolder(lock)
	}
	bad, err := readCorruptions(p.corruptFile())
	if err != nil {
		in.Problems = append(in.Problems, err.Error())
	}
	for _, c := range bad {
		in.Problems = append(in.Problems, fmt.Sprintf("the bundle's registry refused corrupted blob %s (%s, image %s, file %s): the bundle is damaged; rebuild or re-copy it",
			c.Digest, c.Detail, c.Image, c.Path))
	}
	return status.Build(in), nil
}
