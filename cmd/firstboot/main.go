// Command firstboot brings a booted bootstick (or a developer's host) up as
// the infra-local-controller and provisions the site. The engine and its
// subcommands are in internal/firstboot.
package main

import "github.com/bootstick/bootstick/internal/firstboot"

func main() { firstboot.NewApp().Main() }
