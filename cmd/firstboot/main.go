// Command firstboot brings a booted bootstick (or a developer's host) up as
// the infra-local-controller and provisions the site. Each subcommand is in a
// file of its own.
package main

import "github.com/bootstick/bootstick/internal/cli"

var app = &cli.App{Name: "firstboot", Short: "bring up the infra-local-controller and provision the site"}

func main() { app.Main() }
