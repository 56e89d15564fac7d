// Package firstboot is the engine behind cmd/firstboot: the resumable
// steps that bring a booted stick (or a developer's host) up as the
// infra-local-controller, the site step, status, reset, validate and
// render. Each subcommand lives in a file of its own and registers itself
// in init; cmd/firstboot only runs the command line NewApp returns.
package firstboot

import "github.com/bootstick/bootstick/internal/cli"

var commands []cli.Command

func register(c cli.Command) { commands = append(commands, c) }

// NewApp returns the firstboot command line with every subcommand.
func NewApp() *cli.App {
	a := &cli.App{Name: "firstboot", Short: "bring up the infra-local-controller and provision the site"}
	a.RegisterGroup(siteGroup, "change the site of the running appliance (day 2)")
	for _, c := range commands {
		a.Register(c)
	}
	return a
}
