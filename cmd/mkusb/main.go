// Command mkusb builds the bootstick: one hybrid ISO holding a Debian live
// OS, an offline registry of every image the appliance runs, its manifests
// and binary packages. Each subcommand is in a file of its own.
package main

import "github.com/bootstick/bootstick/internal/cli"

var app = &cli.App{Name: "mkusb", Short: "build and check bootstick media"}

func main() { app.Main() }
