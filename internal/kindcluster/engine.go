// Package kindcluster drives kind for firstboot's kind mode: it finds the
// container engine kind will use, makes the node image available offline,
// creates (or reuses) the cluster and loads the bundle's images into its
// nodes, all from the bundle's OCI layout.
package kindcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"time"

	"github.com/bootstick/bootstick/internal/command"

	"sigs.k8s.io/kind/pkg/cluster"
)

// ErrNoEngine means neither docker nor podman (nor nerdctl) is there, or
// none of them answers.
var ErrNoEngine = errors.New("--mode kind needs a container engine")

// Engine is the container engine kind drives.
type Engine struct {
	Name   string // the program: docker, podman, nerdctl or finch
	option cluster.ProviderOption
}

// engines are kind's node providers in the order kind detects them, with
// the first line their -v prints.
var engines = []struct{ name, version string }{
	{"docker", "Docker version"},
	{"nerdctl", "nerdctl version"},
	{"finch", "finch version"},
	{"podman", "podman version"},
}

// Detect finds the engine kind would use (kind's DetectNodeProvider) and
// checks that it answers. Without one, the error (ErrNoEngine) says what
// is missing and what to do.
func Detect(ctx context.Context) (Engine, error) {
	opt, err := cluster.DetectNodeProvider()
	if err != nil {
		return Engine{}, fmt.Errorf("%w: neither docker nor podman was found in PATH; "+
			"install docker.io or podman (and start it), or use --mode host, which needs neither", ErrNoEngine)
	}
	e := Engine{option: opt}
	for _, c := range engines {
		out, err := exec.CommandContext(ctx, c.name, "-v").Output()
		if err == nil && strings.HasPrefix(string(out), c.version) {
			e.Name = c.name
			break
		}
	}
	if e.Name == "" {
		return Engine{}, fmt.Errorf("%w: kind found a node provider, but none of docker, nerdctl or podman answers -v", ErrNoEngine)
	}
	// -v works without a daemon: ask the engine itself.
	ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := command.Run(ictx, command.Options{Tail: 1}, e.Name, "info"); err != nil {
		return Engine{}, fmt.Errorf("%w: %s is installed but does not work (%v); "+
			"start it (for docker: the docker service), or use --mode host, which needs no container engine",
			ErrNoEngine, e.Name, err)
	}
	return e, nil
}

// HasImage reports whether the engine holds the image.
func (e Engine) HasImage(ctx context.Context, ref string) bool {
	return exec.CommandContext(ctx, e.Name, "image", "inspect", ref).Run() == nil
}

// LoadImage runs `<engine> load` over the docker archive write produces,
// streamed through a pipe.
func (e Engine) LoadImage(ctx context.Context, write func(w io.Writer) error) error {
	wErr, err := feed(write, func(r io.Reader) error {
		_, err := command.Run(ctx, command.Options{Stdin: r, Tail: 3}, e.Name, "load")
		return err
	})
	if wErr != nil {
		return fmt.Errorf("%s load: writing the archive: %w", e.Name, wErr)
	}
	return err
}

// feed streams what write produces into read through a pipe. It returns
// write's error (unless read merely stopped reading) and read's.
func feed(write func(w io.Writer) error, read func(r io.Reader) error) (writeErr, readErr error) {
	pr, pw := io.Pipe()
	werr := make(chan error, 1)
	go func() {
		err := write(pw)
		pw.CloseWithError(err)
		werr <- err
	}()
	readErr = read(pr)
	pr.CloseWithError(io.ErrClosedPipe) // unblocks the writer if read stopped early
	if err := <-werr; err != nil && !errors.Is(err, io.ErrClosedPipe) {
		writeErr = err
	}
	return writeErr, readErr
}
