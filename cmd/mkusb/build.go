package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/bootstick/bootstick/internal/payload"

	flag "github.com/spf13/pflag"

	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/cli"
	"github.com/bootstick/bootstick/internal/progress"
	"github.com/bootstick/bootstick/internal/stick"
)

func init() {
	app.Register(cli.Command{
		Name:  "build",
		Usage: "build [--bundle F] [--output F] [--cache DIR] [--site F [--age-identity F] [--allow-cleartext]] [--locked] [--json]",
		Short: "build the bootable ISO from a bundle (resolving it into its lock first)",
		Flags: func(fs *flag.FlagSet) func(context.Context, []string) error {
			var o stick.Options
			fs.StringVar(&o.Bundle, "bundle", "bundle/default.yaml", "the bundle file")
			fs.StringVar(&o.Lock, "lock", "", "the lock file (default: the bundle's name with .lock)")
			fs.BoolVar(&o.Locked, "locked", false, "fail instead of changing the lock (build exactly what it pins)")
			fs.StringVar(&o.Output, "output", "out/bootstick.iso", "the ISO to write (through a temporary file renamed into place)")
			cacheDir := fs.String("cache", cas.DefaultRoot(), "the cache folder ($BOOTSTICK_CACHE)")
			fs.StringVar(&o.Site, "site", "", "a site file to validate and embed as /bundle/site/site.yaml")
			fs.StringVar(&o.AgeIdentity, "age-identity", "", "age identity that decrypts the site's encrypted passwords")
			fs.BoolVar(&o.AllowCleartext, "allow-cleartext", false, "let the site carry BMC passwords in clear text (refused without it: use encryptedPassword)")
			fs.StringVar(&o.Firstboot, "firstboot", "bin/firstboot", "the firstboot binary for the appliance layer (make bin/firstboot)")
			fs.StringVar(&o.Overlay, "overlay", "overlay", "the folder laid over the OS")
			asJSON := fs.Bool("json", false, "print the build's summary as JSON")
			return func(ctx context.Context, args []string) error {
				if err := cli.NoArgs(args); err != nil {
					return err
				}
				epoch, err := sourceDateEpoch()
				if err != nil {
					return err
				}
				o.Epoch = epoch
				store, err := cas.Open(*cacheDir)
				if err != nil {
					return err
				}
				o.Store = store
				if err := os.MkdirAll(filepath.Dir(o.Output), 0o755); err != nil {
					return fmt.Errorf("output %s: %w", o.Output, err)
				}
				o.Progress = progress.For(os.Stderr)
				start := time.Now()
				res, err := stick.Build(ctx, o)
				if err != nil {
					return err
				}
				if *asJSON {
					return printJSON(buildSummary(res, time.Since(start)))
				}
				printBuild(res, time.Since(start))
				return nil
			}
		},
	})
}

func printBuild(r *stick.Result, took time.Duration) {
	lockNote := "unchanged"
	if r.LockChanged {
		lockNote = "written"
	}
	fmt.Printf("lock      %s (%s)\n", r.LockFile, lockNote)
	fmt.Printf("release   Kubernetes %s (%s)\n", r.Lock.Kubernetes.Version, r.Lock.Kubernetes.Source)
	p := r.Payload
	share := 0.0
	if p.ImageBytes > 0 {
		share = float64(p.RegistryBytes) / float64(p.ImageBytes)
	}
	fmt.Printf("registry  %d images, %d blobs, %.1f MB (%.4f of the images' %.1f MB: shared blobs stored once)\n",
		p.Images, p.Blobs, float64(p.RegistryBytes)/1e6, share, float64(p.ImageBytes)/1e6)
	fmt.Printf("payload   %d files, %.1f MB\n", p.Files, float64(p.Bytes)/1e6)
	for _, s := range r.Steps {
		fmt.Printf("  step %-13s %s\n", s.Name, s.Took.Round(10*time.Millisecond))
	}
	fmt.Printf("wrote %s: %.1f MB in %s\n", r.Output, float64(r.Size)/1e6, took.Round(100*time.Millisecond))
}

// buildReport is what `build --json` prints.
type buildReport struct {
	Output      string             `json:"output"`
	Size        int64              `json:"size"`
	Lock        string             `json:"lock"`
	LockChanged bool               `json:"lockChanged"`
	Kubernetes  string             `json:"kubernetes"`
	Payload     payload.Stats      `json:"payload"`
	Steps       map[string]float64 `json:"stepSeconds"`
	Seconds     float64            `json:"seconds"`
}

func buildSummary(r *stick.Result, took time.Duration) buildReport {
	b := buildReport{Output: r.Output, Size: r.Size, Lock: r.LockFile, LockChanged: r.LockChanged,
		Kubernetes: r.Lock.Kubernetes.Version, Payload: r.Payload, Steps: map[string]float64{}, Seconds: took.Seconds()}
	for _, s := range r.Steps {
		b.Steps[s.Name] = s.Took.Seconds()
	}
	return b
}
