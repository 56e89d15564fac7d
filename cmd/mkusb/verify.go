package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/bootstick/bootstick/internal/cli"
	"github.com/bootstick/bootstick/internal/progress"
	"github.com/bootstick/bootstick/internal/stick"
)

func init() {
	app.Register(cli.Command{
		Name:  "verify",
		Usage: "verify ISO",
		Short: "re-hash every payload file and registry blob of an ISO against its lock",
		Flags: func(fs *flag.FlagSet) func(context.Context, []string) error {
			return func(ctx context.Context, args []string) error {
				args, err := isoArg(fs, args)
				if err != nil {
					return err
				}
				res, err := stick.Verify(ctx, args[0], progress.For(os.Stderr))
				if err != nil {
					return err
				}
				if len(res.Problems) > 0 {
					return fmt.Errorf("%s is damaged: %d problems:\n  %s", args[0], len(res.Problems), strings.Join(res.Problems, "\n  "))
				}
				fmt.Printf("%s: ok: %d files and %d registry blobs (%.1f MB) match the lock\n", args[0], res.Files, res.Blobs, float64(res.Bytes)/1e6)
				return nil
			}
		},
	})
}
