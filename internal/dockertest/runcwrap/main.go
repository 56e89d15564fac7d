// Command runcwrap is the OCI runtime of the tests' own docker engine on a
// host whose root lacks CAP_SYS_RESOURCE (these test machines): it drops
// that capability from the container's or the exec'd process's spec, then
// runs runc. Docker gives a privileged container (kind's nodes) every
// capability it knows, and runc fails ("unable to apply caps") on one the
// host's bounding set lacks.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
)

// dropped is the capability the host cannot grant.
const dropped = "CAP_SYS_RESOURCE"

func main() {
	args := os.Args[1:]
	for i := 0; i+1 < len(args); i++ {
		var err error
		switch args[i] {
		case "--bundle", "-b": // create, run: the bundle's config.json
			err = drop(filepath.Join(args[i+1], "config.json"), true)
		case "--process", "-p": // exec: the process's spec
			err = drop(args[i+1], false)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "runcwrap: %v\n", err)
			os.Exit(1)
		}
	}
	runc, err := exec.LookPath("runc")
	if err != nil {
		fmt.Fprintf(os.Stderr, "runcwrap: %v\n", err)
		os.Exit(1)
	}
	err = syscall.Exec(runc, append([]string{"runc"}, args...), os.Environ())
	fmt.Fprintf(os.Stderr, "runcwrap: exec %s: %v\n", runc, err)
	os.Exit(1)
}

// drop removes the capability from every set of the spec at path: an
// OCI runtime spec (bundle) or a process spec.
func drop(path string, bundle bool) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var spec map[string]any
	if err := json.Unmarshal(data, &spec); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	proc := spec
	if bundle {
		proc, _ = spec["process"].(map[string]any)
	}
	caps, _ := proc["capabilities"].(map[string]any)
	if caps == nil {
		return nil
	}
	for set, v := range caps {
		list, _ := v.([]any)
		caps[set] = slices.DeleteFunc(list, func(c any) bool { return c == dropped })
	}
	out, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o600)
}
