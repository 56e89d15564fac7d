// Package debroot makes Debian root file systems from packages with
// mmdebstrap: the live OS of the stick, and the roots the toolchain turns
// into the Ironic image, the deploy ramdisk and the compute OS image.
//
// The suite and mirror are explicit; the mirror comes from the build
// host's apt configuration (rootfs.HostMirror) unless the user names one.
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
	"github.com/bootstick/bootstick/internal/mounts"
)

// Run is one mmdebstrap run.
type Run struct {
	Suite, Mirror string
	// Variant is mmdebstrap's variant; "apt" when empty.
	Variant string
	// Include are package names, or absolute paths of .deb files.
	Include []string
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
	variant := r.Variant
	if variant == "" {
		variant = "apt"
	}
	var names, files []string
	for _, p := range r.Include {
		if filepath.IsAbs(p) {
			files = append(files, p)
		} else {
			names = append(names, p)
		}
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
	args = append(args, r.Args...)
	args = append(args, r.Suite, root, r.Mirror)
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
		return fmt.Errorf("mmdebstrap %s from %s: %w\n%s", r.Suite, r.Mirror, err, command.Tail(out.String(), 20))
	}
	return nil
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
