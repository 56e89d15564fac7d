package firstboot

import (
	"context"
	"errors"

	flag "github.com/spf13/pflag"

	"github.com/bootstick/bootstick/internal/logctx"

	"github.com/bootstick/bootstick/internal/cli"
	"github.com/bootstick/bootstick/internal/datadisk"
	"github.com/bootstick/bootstick/internal/sshhostkeys"
)

func init() {
	register(cli.Command{
		Name:  "ssh-host-keys",
		Usage: "ssh-host-keys [--data DIR]",
		Short: "(on the stick, before sshd) replace the stick's built-in sshd host keys with this machine's own, kept on the data disk",
		Flags: func(fs *flag.FlagSet) func(ctx context.Context, args []string) error {
			data := fs.String("data", defaultData, "the data disk's mount point")
			return func(ctx context.Context, args []string) error {
				if err := cli.NoArgs(args); err != nil {
					return err
				}
				if !isLiveSystem() {
					return errors.New("ssh-host-keys replaces /etc/ssh's host keys: it runs only on the booted stick (no /run/live/medium here)")
				}
				return ensureHostKeys(ctx, defaultPaths(*data))
			}
		},
	})
}

// ensureHostKeys mounts the data disk when there is one (firstboot mounts
// it again, harmlessly) and gives sshd the keys kept there, or new ones.
func ensureHostKeys(ctx context.Context, p paths) error {
	log := logctx.From(ctx)
	d := diskOptions(runOptions{mode: "appliance", data: p.Data}, p)
	dev, found, err := datadisk.Attach(ctx, d)
	switch {
	case err != nil:
		log.Warn("mounting the data disk", "device", dev, "err", err)
	case !found:
		log.Info("no data disk yet: new host keys, kept once firstboot prepares the disk")
	}
	res, err := sshhostkeys.Ensure(etcSSH, p.sshHostKeys(), found && err == nil)
	if err != nil {
		return err
	}
	log.Info("sshd host keys "+string(res), "keys", etcSSH)
	return nil
}

// keepHostKeys keeps the machine's host keys on the data disk (the first
// boot made them before the disk existed).
func keepHostKeys(ctx context.Context, p paths) {
	if !isLiveSystem() {
		return
	}
	if err := sshhostkeys.Save(etcSSH, p.sshHostKeys()); err != nil {
		logctx.From(ctx).Warn("keeping sshd's host keys on the data disk", "err", err)
	}
}
