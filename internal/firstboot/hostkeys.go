package firstboot

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"path/filepath"

	"github.com/bootstick/bootstick/internal/cli"
	"github.com/bootstick/bootstick/internal/datadisk"
	"github.com/bootstick/bootstick/internal/sshhostkeys"
)

// etcSSH is where sshd reads its host keys.
const etcSSH = "/etc/ssh"

// sshHostKeys is where the bootstrap machine's own sshd host keys are kept.
func (p paths) sshHostKeys() string { return filepath.Join(p.Data, "ssh-host-keys") }

func init() {
	register(cli.Command{
		Name:  "ssh-host-keys",
		Usage: "ssh-host-keys [--data DIR]",
		Short: "(on the stick, before sshd) replace the stick's built-in sshd host keys with this machine's own, kept on the data disk",
		Flags: func(fs *flag.FlagSet) func(ctx context.Context, args []string) error {
			data := fs.String("data", "/var/lib/bootstick", "the data disk's mount point")
			return func(ctx context.Context, args []string) error {
				if err := cli.NoArgs(args); err != nil {
					return err
				}
				if !isLiveSystem() {
					return errors.New("ssh-host-keys replaces /etc/ssh's host keys: it runs only on the booted stick (no /run/live/medium here)")
				}
				return ensureHostKeys(ctx, defaultPaths(*data), slog.Default())
			}
		},
	})
}

// ensureHostKeys mounts the data disk when there is one (firstboot mounts
// it again, harmlessly) and gives sshd the keys kept there, or new ones.
func ensureHostKeys(ctx context.Context, p paths, log *slog.Logger) error {
	e := &env{opts: runOptions{mode: "appliance", data: p.Data}, paths: p, log: log}
	dev, found, err := datadisk.Attach(ctx, e.diskOptions())
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
func (e *env) keepHostKeys(log *slog.Logger) {
	if !isLiveSystem() {
		return
	}
	if err := sshhostkeys.Save(etcSSH, e.paths.sshHostKeys()); err != nil {
		log.Warn("keeping sshd's host keys on the data disk", "err", err)
	}
}
