package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	flag "github.com/spf13/pflag"

	"github.com/bootstick/bootstick/internal/cli"
	"github.com/bootstick/bootstick/internal/progress"
	"github.com/bootstick/bootstick/internal/stick"
)

func init() {
	app.Register(cli.Command{
		Name:  "verify",
		Usage: "verify ISO [--json]",
		Short: "re-hash every payload file and registry blob of an ISO against its lock",
		Flags: func(fs *flag.FlagSet) func(context.Context, []string) error {
			asJSON := fs.Bool("json", false, "print the result as JSON; the exit code is the same")
			return func(ctx context.Context, args []string) error {
				iso, err := cli.OneArg(args, "ISO")
				if err != nil {
					return err
				}
				res, err := stick.Verify(ctx, iso, progress.For(os.Stderr))
				if err != nil {
					return err
				}
				if *asJSON {
					if err := printJSON(verifyReport{ISO: iso, OK: len(res.Problems) == 0, Files: res.Files, Blobs: res.Blobs,
						Bytes: res.Bytes, Problems: res.Problems}); err != nil {
						return err
					}
					if len(res.Problems) > 0 {
						return fmt.Errorf("%s is damaged: %d problems (listed above)", iso, len(res.Problems))
					}
					return nil
				}
				if len(res.Problems) > 0 {
					return fmt.Errorf("%s is damaged: %d problems:\n  %s", iso, len(res.Problems), strings.Join(res.Problems, "\n  "))
				}
				fmt.Printf("%s: ok: %d files and %d registry blobs (%.1f MB) match the lock\n", iso, res.Files, res.Blobs, float64(res.Bytes)/1e6)
				return nil
			}
		},
	})
}

// verifyReport is what `verify --json` prints.
type verifyReport struct {
	ISO      string   `json:"iso"`
	OK       bool     `json:"ok"`
	Files    int      `json:"files"`
	Blobs    int      `json:"blobs"`
	Bytes    int64    `json:"bytes"`
	Problems []string `json:"problems,omitempty"`
}

// printJSON prints v as indented JSON on stdout.
func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
