// Package debroot makes Debian root file systems from packages with
// mmdebstrap: the live OS of the stick, and the roots the toolchain turns
// into the Ironic image, the deploy ramdisk and the compute OS image.
//
// The suite and mirrors are explicit (debs.Sources: the suite and its
// -updates at the mirror, its -security at the security mirror); they come
// from the build host's apt configuration (rootfs.HostMirror) unless the
// user names them.
// Downloaded .deb files are kept in a cache folder across builds, so a
// rebuild downloads nothing it already has.
package debroot

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bootstick/bootstick/internal/command"
	"github.com/bootstick/bootstick/internal/debs"
	"github.com/bootstick/bootstick/internal/mounts"
)

// Run is one mmdebstrap run.
type Run struct {
	// Sources are the suites read; apt installs the highest version they
	// serve, so the suite's security and stable updates.
	Sources debs.Sources
	// Components of the archive; main when empty.
	Components []string
	// Variant is mmdebstrap's variant; "apt" when empty.
	Variant string
	// Include are package names, or absolute paths of .deb files.
	Include []string
	// Pins are exact versions (a lock's): each is installed at its
	// version, or the build fails, and the binaries of its source go with
	// it (pinArgs).
	Pins []debs.Package
	// DebCache keeps the downloaded .deb files across runs.
	DebCache string
	// Args are more mmdebstrap options (hooks, --dpkgopt=...).
	Args []string
	// Epoch is SOURCE_DATE_EPOCH; zero means the Unix epoch.
	Epoch time.Time
}

// Mmdebstrap builds a root at root (a folder that must not exist yet).
func Mmdebstrap(ctx context.Context, r Run, root string) error {
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		return fmt.Errorf("mmdebstrap is missing (apt-get install mmdebstrap): %w", err)
	}
	args, cleanup, err := r.args(root)
	if err != nil {
		return err
	}
	defer cleanup()
	cmd := exec.CommandContext(ctx, "mmdebstrap", args...)
	cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH="+strconv.FormatInt(unix(r.Epoch), 10))
	var out tail
	cmd.Stdout, cmd.Stderr = &out, &out
	// On cancel, let mmdebstrap unmount what it mounted in the chroot
	// (SIGTERM runs its cleanup); SIGKILL only after a grace period.
	// mmdebstrap, apt and dpkg run in a process group of their own, so that
	// none of them goes on writing into the build folder after a cancel.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	defer func() {
		if cmd.Process != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	}()
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("mmdebstrap %s: %w\n%s", r.Sources, err, command.Tail(out.String(), 20))
	}
	return nil
}

// args are mmdebstrap's arguments; cleanup removes the files they name.
// Every suite is an apt source line of its own (Sources.Lines), checked
// with the Debian archive keyring.
func (r Run) args(root string) ([]string, func(), error) {
	lines, err := r.Sources.Lines(r.Components)
	if err != nil {
		return nil, nil, fmt.Errorf("mmdebstrap: %w", err)
	}
	variant := r.Variant
	if variant == "" {
		variant = "apt"
	}
	pinned := map[string]bool{}
	for _, p := range r.Pins {
		pinned[p.Name] = true
	}
	var names, files []string
	for _, p := range r.Include {
		switch {
		case filepath.IsAbs(p):
			files = append(files, p)
		case !pinned[p]:
			names = append(names, p)
		}
	}
	for _, p := range r.Pins {
		names = append(names, p.String())
	}
	args := []string{"--variant=" + variant, "--mode=root", "--format=directory"}
	if len(names) > 0 {
		args = append(args, "--include="+strings.Join(names, ","))
	}
	for _, f := range files {
		args = append(args, "--include="+f)
	}
	if len(files) > 0 {
		// Makes the .deb files given by path visible inside the chroot.
		args = append(args, "--hook-dir=/usr/share/mmdebstrap/hooks/file-mirror-automount")
	}
	if r.DebCache != "" {
		// The .deb cache is copied in before and out after the install
		// (mmdebstrap's documented recipe), so rebuilds download nothing twice.
		args = append(args,
			"--skip=download/empty", "--skip=essential/unlink",
			"--setup-hook=mkdir -p \"$1\"/var/cache/apt/archives/",
			"--setup-hook=sync-in "+r.DebCache+" /var/cache/apt/archives/",
			"--customize-hook=sync-out /var/cache/apt/archives "+r.DebCache)
	}
	pins, cleanup, err := pinArgs(filepath.Dir(root), r.Pins)
	if err != nil {
		return nil, nil, err
	}
	args = append(args, pins...)
	args = append(args, r.Args...)
	args = append(args, r.Sources.Suite, root)
	return append(args, lines...), cleanup, nil
}

// pinsFile is where pinArgs puts its apt preferences in the root while
// it is built.
const pinsFile = "/etc/apt/preferences.d/bootstick-versions.pref"

// pinArgs makes each pin's version the one apt installs throughout the
// build, for the package and the other binaries of its source at that
// version: apt preferences (priority 1001) in a file under dir, which a
// setup hook puts into the root and a customize hook removes. Without
// them the packages apt installs first (the essential ones) and a pinned
// package's siblings (openssh-client of openssh-server, which needs its
// very version) would be the newest the mirrors serve, a security update
// that came out after the lock.
func pinArgs(dir string, pins []debs.Package) ([]string, func(), error) {
	if len(pins) == 0 {
		return nil, func() {}, nil
	}
	var b strings.Builder
	for _, p := range pins {
		src := p.Source
		if src == "" {
			src = p.Name
		}
		fmt.Fprintf(&b, "Package: %s src:%s\nPin: version %s\nPin-Priority: 1001\n\n", p.Name, src, p.Version)
	}
	f, err := os.CreateTemp(dir, ".apt-pins-*.pref")
	if err != nil {
		return nil, nil, fmt.Errorf("mmdebstrap: pinning versions: %w", err)
	}
	cleanup := func() { os.Remove(f.Name()) }
	_, err = f.WriteString(b.String())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		cleanup()
		return nil, nil, fmt.Errorf("mmdebstrap: pinning versions: %w", err)
	}
	return []string{
		"--setup-hook=upload " + f.Name() + " " + pinsFile,
		"--customize-hook=rm -f \"$1\"" + pinsFile,
	}, cleanup, nil
}

// tail keeps the last 4 KiB of a command's output for error messages.
type tail struct{ b []byte }

func (t *tail) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > 4096 {
		t.b = t.b[len(t.b)-4096:]
	}
	return len(p), nil
}

func (t *tail) String() string { return string(bytes.TrimSpace(t.b)) }

// SafeRemove removes a build folder, first detaching anything still mounted
// below it (a killed mmdebstrap may leave /proc, /sys or /dev mounts in its
// chroot: removing through those would harm the host). It refuses to remove
// a folder that still has mounts.
func SafeRemove(dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	for try := 0; ; try++ {
		mps, err := mounts.Under(dir)
		if err != nil {
			return err
		}
		if len(mps) == 0 {
			break
		}
		if try == 3 {
			return fmt.Errorf("%s still has mounts (%s); unmount them and remove it by hand", dir, strings.Join(mps, ", "))
		}
		sort.Sort(sort.Reverse(sort.StringSlice(mps))) // deepest first
		for _, mp := range mps {
			_ = syscall.Unmount(mp, syscall.MNT_DETACH)
		}
	}
	return os.RemoveAll(dir)
}

// unix is t in Unix seconds; the zero time is the Unix epoch.
func unix(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.Unix()
}
