package main

import (
	"context"
	"fmt"
	"os"

	flag "github.com/spf13/pflag"

	"github.com/bootstick/bootstick/internal/cli"
	"github.com/bootstick/bootstick/internal/progress"
	"github.com/bootstick/bootstick/internal/usbwrite"
)

func init() {
	app.Register(cli.Command{
		Name:  "write",
		Usage: "write ISO --device /dev/sdX [--force]",
		Short: "write an ISO to a USB stick, sync, and read it back to verify",
		Flags: func(fs *flag.FlagSet) func(context.Context, []string) error {
			device := fs.String("device", "", "the whole-disk device of the stick, e.g. /dev/sdX (required)")
			force := fs.Bool("force", false, "write even to a mounted or non-removable device")
			return func(ctx context.Context, args []string) error {
				iso, err := cli.OneArg(args, "ISO")
				if err != nil {
					return err
				}
				if *device == "" {
					return cli.Usagef("--device is required")
				}
				err = usbwrite.Write(ctx, usbwrite.Options{Image: iso, Device: *device, Force: *force, Progress: progress.For(os.Stderr)})
				if err != nil {
					return err
				}
				fmt.Printf("wrote %s to %s and read it back: ok\n", iso, *device)
				return nil
			}
		},
	})
}
