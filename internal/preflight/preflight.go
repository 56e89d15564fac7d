// Package preflight checks, before any long work starts, that the programs
// and files a command needs are on this machine, and names every missing
// one at once with the Debian package that brings it.
package preflight

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
)

// Need is one program (looked up on PATH) or one file (an absolute path)
// and the Debian package that provides it.
type Need struct {
	What    string
	Package string
}

// Program is a program looked up on PATH.
func Program(name, pkg string) Need { return Need{What: name, Package: pkg} }

// File is a file at an absolute path.
func File(path, pkg string) Need { return Need{What: path, Package: pkg} }

// MissingError lists everything missing.
type MissingError struct {
	Missing []Need
}

func (e *MissingError) Error() string {
	var what, pkgs []string
	for _, n := range e.Missing {
		what = append(what, n.What)
		if !slices.Contains(pkgs, n.Package) {
			pkgs = append(pkgs, n.Package)
		}
	}
	return fmt.Sprintf("missing on this machine: %s; install them with `make deps` (as root), or apt-get install %s",
		strings.Join(what, ", "), strings.Join(pkgs, " "))
}

// Check returns a *MissingError naming every need that is not met.
func Check(needs ...Need) error {
	var missing []Need
	for _, n := range needs {
		if !met(n) {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return &MissingError{Missing: missing}
	}
	return nil
}

func met(n Need) bool {
	if strings.HasPrefix(n.What, "/") {
		_, err := os.Stat(n.What)
		return err == nil
	}
	_, err := exec.LookPath(n.What)
	return err == nil
}
