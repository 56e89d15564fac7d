package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	flag "github.com/spf13/pflag"

	"github.com/bootstick/bootstick/internal/progress"

	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/cli"
	"github.com/bootstick/bootstick/internal/recipes"
	"github.com/bootstick/bootstick/internal/toolchain"
)

func init() {
	app.Register(cli.Command{
		Name:  "toolchain",
		Usage: "toolchain [--recipes F] [--cache DIR]",
		Short: "build Kubernetes, etcd, CoreDNS, pause and their images from pinned sources into the cache",
		Flags: func(fs *flag.FlagSet) func(context.Context, []string) error {
			recipesFile := fs.String("recipes", "images/recipes.yaml", "the recipes file")
			cacheDir := fs.String("cache", cas.DefaultRoot(), "the cache folder ($BOOTSTICK_CACHE)")
			return func(ctx context.Context, args []string) error {
				if err := cli.NoArgs(args); err != nil {
					return err
				}
				epoch, err := sourceDateEpoch()
				if err != nil {
					return err
				}
				spec, err := recipes.Load(*recipesFile)
				if err != nil {
					return err
				}
				store, err := cas.Open(*cacheDir)
				if err != nil {
					return err
				}
				start := time.Now()
				res, err := toolchain.Build(ctx, toolchain.Options{Spec: spec, Store: store, Epoch: epoch, Progress: progress.For(os.Stderr)})
				if err != nil {
					return err
				}
				printToolchain(res, time.Since(start))
				return nil
			}
		},
	})
}

// sourceDateEpoch reads SOURCE_DATE_EPOCH; the Unix epoch when unset.
func sourceDateEpoch() (time.Time, error) {
	v := os.Getenv("SOURCE_DATE_EPOCH")
	if v == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: want seconds since 1970 as a whole number", v)
	}
	return time.Unix(n, 0).UTC(), nil
}

func printToolchain(res *toolchain.Result, took time.Duration) {
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "BINARY\tRECIPE\tSIZE\tDIGEST\n")
	for _, b := range res.Manifest.Binaries {
		fmt.Fprintf(w, "%s\t%s\t%.1f MB\t%s\n", b.Name, b.Recipe, float64(b.Size)/1e6, b.Digest)
	}
	fmt.Fprintf(w, "\nIMAGE\tDIGEST\n")
	for _, im := range res.Manifest.Images {
		fmt.Fprintf(w, "%s\t%s\n", im.Ref, im.Digest)
	}
	w.Flush()
	built := 0
	for _, b := range res.Manifest.Actions {
		if b {
			built++
		}
	}
	fmt.Printf("\ntoolchain %s: %d of %d steps built, the rest cached, in %s\n", res.Dir, built, len(res.Manifest.Actions), took.Round(100*time.Millisecond))
}
