// Package ramdisk packs a Debian root into a kernel and an initramfs that
// holds the whole root, as diskimage-builder packs the deploy ramdisk: the
// kernel unpacks the archive into its root file system and starts /init,
// which is systemd, so the root runs from memory with no other disk.
package ramdisk

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/bootstick/bootstick/internal/command"
)

// Options say where the kernel and initramfs go.
type Options struct {
	Kernel, Initramfs string
	// Modules are the folders below lib/modules/VERSION/kernel to keep
	// (e.g. drivers/net); empty keeps every module.
	Modules []string
	// Firmware are the kernel modules whose firmware files (as modinfo
	// names them) stay under lib/firmware; every other file there goes.
	// Empty keeps every firmware file.
	Firmware []string
	// Level is zstd's level; 10 when zero.
	Level int
	// Epoch is every file's time in the archive.
	Epoch time.Time
}

// Needs are the programs Pack runs.
var Needs = []string{"cpio", "zstd", "depmod", "modinfo"}

// Pack moves the newest kernel out of root/boot, trims the kernel modules,
// and writes root as a newc cpio archive compressed with zstd. root is
// changed on the way.
func Pack(ctx context.Context, root string, o Options) error {
	for _, n := range Needs {
		if _, err := exec.LookPath(n); err != nil {
			return fmt.Errorf("ramdisk: %s is missing (apt-get install cpio zstd kmod): %w", n, err)
		}
	}
	kernels, _ := filepath.Glob(filepath.Join(root, "boot", "vmlinuz-*"))
	if len(kernels) == 0 {
		return fmt.Errorf("ramdisk: no kernel in %s/boot: add linux-image-amd64 to the root's packages", root)
	}
	sort.Strings(kernels)
	k := kernels[len(kernels)-1]
	version := strings.TrimPrefix(filepath.Base(k), "vmlinuz-")
	kernel, err := os.ReadFile(k)
	if err != nil {
		return fmt.Errorf("ramdisk: %w", err)
	}
	if err := os.WriteFile(o.Kernel, kernel, 0o644); err != nil {
		return fmt.Errorf("ramdisk: %w", err)
	}
	// The root is the ramdisk: the kernel, any initrd and the boot loader
	// files stay out of it.
	if err := os.RemoveAll(filepath.Join(root, "boot")); err != nil {
		return fmt.Errorf("ramdisk: %w", err)
	}
	if err := os.Mkdir(filepath.Join(root, "boot"), 0o755); err != nil {
		return fmt.Errorf("ramdisk: %w", err)
	}
	if _, err := os.Lstat(filepath.Join(root, "init")); err != nil {
		if err := os.Symlink("/lib/systemd/systemd", filepath.Join(root, "init")); err != nil {
			return fmt.Errorf("ramdisk: %w", err)
		}
	}
	if len(o.Modules) > 0 {
		if err := trimModules(ctx, root, version, o.Modules); err != nil {
			return err
		}
	}
	if len(o.Firmware) > 0 {
		want := map[string][]string{}
		for _, m := range o.Firmware {
			out, err := command.Output(ctx, command.Options{}, "modinfo", "-b", root, "-k", version, "-F", "firmware", m)
			if err != nil {
				return fmt.Errorf("ramdisk: the firmware of module %s (is it among the kept modules?): %w", m, err)
			}
			if want[m] = strings.Fields(string(out)); len(want[m]) == 0 {
				return fmt.Errorf("ramdisk: module %s loads no firmware: leave it out of the firmware list", m)
			}
		}
		if err := keepFirmware(filepath.Join(root, "usr", "lib", "firmware"), want); err != nil {
			return err
		}
	}
	return archive(ctx, root, o)
}

// keepFirmware keeps, in dir (a root's usr/lib/firmware), the files that
// want names for each module, plain or compressed as the kernel loads
// them (.xz, .zst), with every link on the way to them and every file in
// a folder a link leads to; it removes every other file, and the folders
// left empty. A module none of whose files is there is an error: its
// package is missing. So is a link that leads out of dir.
func keepFirmware(dir string, want map[string][]string) error {
	keep := map[string]bool{} // files, relative to dir
	keepUnder := []string{}   // folders a link leads to
	for m, files := range want {
		found := false
		for _, f := range files {
			for _, name := range []string{f, f + ".xz", f + ".zst"} {
				ok, err := keepPath(dir, name, keep, &keepUnder)
				if err != nil {
					return err
				}
				found = found || ok
			}
		}
		if !found {
			return fmt.Errorf("ramdisk: none of module %s's firmware files %v is in %s: add the Debian package that holds them", m, files, dir)
		}
	}
	var dirs []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case d.IsDir():
			if rel != "." {
				dirs = append(dirs, p)
			}
		case !keep[rel] && !slices.ContainsFunc(keepUnder, func(k string) bool { return strings.HasPrefix(rel, k+"/") }):
			return os.Remove(p)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("ramdisk: trimming the firmware: %w", err)
	}
	// Deepest first: a folder is empty once its children are gone.
	for i := len(dirs) - 1; i >= 0; i-- {
		if entries, err := os.ReadDir(dirs[i]); err == nil && len(entries) == 0 {
			if err := os.Remove(dirs[i]); err != nil {
				return fmt.Errorf("ramdisk: trimming the firmware: %w", err)
			}
		}
	}
	return nil
}

// trimModules keeps the named module folders of one kernel and rebuilds
// the module index.
func trimModules(ctx context.Context, root, version string, keep []string) error {
	base := filepath.Join(root, "lib", "modules", version, "kernel")
	var drop []string
	err := filepath.WalkDir(base, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(base, p)
		for _, k := range keep {
			if rel == k || strings.HasPrefix(rel, strings.TrimSuffix(k, "/")+"/") {
				return nil
			}
		}
		drop = append(drop, p)
		return nil
	})
	if err != nil {
		return fmt.Errorf("ramdisk: listing modules: %w", err)
	}
	for _, p := range drop {
		if err := os.Remove(p); err != nil {
			return fmt.Errorf("ramdisk: %w", err)
		}
	}
	if _, err := command.Run(ctx, command.Options{}, "depmod", "-b", root, version); err != nil {
		return fmt.Errorf("ramdisk: indexing the kept modules: %w", err)
	}
	return nil
}

// archive writes the cpio archive: every path in byte order, owned by
// root, with the epoch as its time, so the same root gives the same bytes.
func archive(ctx context.Context, root string, o Options) error {
	epoch := time.Unix(0, 0)
	if !o.Epoch.IsZero() {
		epoch = o.Epoch
	}
	var paths []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel != "." {
			paths = append(paths, rel)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("ramdisk: %w", err)
	}
	// touch -h sets a link's own time; it never follows one (an absolute
	// link inside the root points at the build host's file).
	if _, err := command.Run(ctx, command.Options{Dir: root}, "find", ".", "-exec", "touch", "-h", "-d", "@"+strconv.FormatInt(epoch.Unix(), 10), "{}", "+"); err != nil {
		return fmt.Errorf("ramdisk: %w", err)
	}
	sort.Strings(paths)
	level := o.Level
	if level == 0 {
		level = 10
	}
	tmp := o.Initramfs + ".tmp"
	out, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("ramdisk: %w", err)
	}
	defer os.Remove(tmp)
	defer out.Close()
	cpio := exec.CommandContext(ctx, "cpio", "--quiet", "-o", "-H", "newc", "--reproducible", "-R", "0:0", "--null")
	cpio.Dir = root
	cpio.Stdin = strings.NewReader(strings.Join(paths, "\x00") + "\x00")
	zstd := exec.CommandContext(ctx, "zstd", "-q", "-T0", "-"+strconv.Itoa(level), "-c")
	pipe, err := cpio.StdoutPipe()
	if err != nil {
		return fmt.Errorf("ramdisk: %w", err)
	}
	zstd.Stdin = pipe
	zstd.Stdout = out
	var cpioErr, zstdErr strings.Builder
	cpio.Stderr, zstd.Stderr = &cpioErr, &zstdErr
	if err := zstd.Start(); err != nil {
		return fmt.Errorf("ramdisk: zstd: %w", err)
	}
	if err := cpio.Run(); err != nil {
		_ = zstd.Wait()
		return fmt.Errorf("ramdisk: cpio: %w: %s", err, command.Tail(cpioErr.String(), 10))
	}
	if err := zstd.Wait(); err != nil {
		return fmt.Errorf("ramdisk: zstd: %w: %s", err, command.Tail(zstdErr.String(), 10))
	}
	if err := out.Sync(); err != nil {
		return fmt.Errorf("ramdisk: %w", err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("ramdisk: %w", err)
	}
	return os.Rename(tmp, o.Initramfs)
}

// keepPath marks name (relative to dir) kept when it exists, following
// each link on its way (in any of its folders, or itself) and keeping
// the link too, to a file or a folder (all of which is kept); false when
// name is not there.
func keepPath(dir, name string, keep map[string]bool, keepUnder *[]string) (bool, error) {
	cur, hops := "", 0
	for _, part := range strings.Split(filepath.Clean(name), "/") {
		cur = filepath.Join(cur, part)
		for {
			fi, err := os.Lstat(filepath.Join(dir, cur))
			if err != nil {
				return false, nil
			}
			if fi.Mode()&os.ModeSymlink == 0 {
				break
			}
			keep[cur] = true
			if hops++; hops > 40 {
				return false, fmt.Errorf("ramdisk: firmware %s: too many links", filepath.Join(dir, name))
			}
			target, err := os.Readlink(filepath.Join(dir, cur))
			if err != nil {
				return false, fmt.Errorf("ramdisk: %w", err)
			}
			// An absolute link names the firmware folder as the booted
			// ramdisk sees it.
			next := filepath.Join(filepath.Dir(cur), target)
			if filepath.IsAbs(target) {
				next = strings.TrimPrefix(strings.TrimPrefix(target, "/usr"), "/lib/firmware/")
			}
			if !filepath.IsLocal(next) {
				return false, fmt.Errorf("ramdisk: firmware link %s leads out of the firmware folder (%s)", filepath.Join(dir, cur), target)
			}
			cur = filepath.Clean(next)
		}
	}
	fi, err := os.Stat(filepath.Join(dir, cur))
	if err != nil {
		return false, nil
	}
	keep[cur] = true
	if fi.IsDir() {
		*keepUnder = append(*keepUnder, cur)
	}
	return true, nil
}
