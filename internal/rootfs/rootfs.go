// Package rootfs builds the Debian live OS for the stick: a root file system
// from Debian packages (mmdebstrap), its kernel and live initrd, the base
// squashfs, and a second squashfs (the appliance's layer) that live-boot
// stacks on top.
//
// Builds are cached under CacheDir/rootfs/<input hash>/. The .deb files are
// kept in CacheDir/rootfs/debs across builds, so a rebuild downloads
// nothing it already has. An entry is built in a temporary folder and
// renamed into place: an interrupted build never leaves an entry that looks
// complete.
package rootfs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/bootstick/bootstick/internal/debroot"
	"github.com/bootstick/bootstick/internal/debs"
	"github.com/bootstick/bootstick/internal/logctx"

	"github.com/bootstick/bootstick/internal/command"

	"github.com/bootstick/bootstick/internal/progress"

	"github.com/bootstick/bootstick/internal/flock"

	"github.com/bootstick/bootstick/internal/cas"
)

// DefaultPackages are always installed.
var DefaultPackages = []string{
	"systemd-sysv", "udev", "kmod", "linux-image-amd64", "live-boot",
	"containerd", "runc", "containernetworking-plugins", "iproute2", "iptables",
	"ca-certificates", "openssh-server", "e2fsprogs", "util-linux",
	// The site's clock (firstboot's clock step runs chronyd).
	"chrony",
	// The appliance's firewall (firstboot's firewall step loads it with nft).
	"nftables",
	// The data disk is LUKS2, its key sealed to the TPM (internal/luks):
	// cryptsetup formats it, systemd-cryptenroll seals the key and
	// systemd-cryptsetup unlocks it, through the TPM libraries systemd
	// loads at run time (Debian makes them Recommends, which the build
	// does not install) and dmsetup's udev rules, which device-mapper waits on.
	"cryptsetup-bin", "dmsetup", "systemd-cryptsetup",
	"libtss2-esys-3.0.2-0t64", "libtss2-mu-4.0.1-0t64", "libtss2-rc0t64", "libtss2-tcti-device0t64",
}

// Names of the files in a cache entry and in the ISO's /live folder.
// live-boot stacks every /live/*.squashfs in name order, the last on top, so
// LayerImage (l) lies over BaseImage (f).
const (
	KernelFile = "vmlinuz"
	InitrdFile = "initrd.img"
	BaseImage  = "filesystem.squashfs"
	LayerImage = "layer.squashfs"
)

// formatVersion changes when the layout of an entry or the way it is built
// changes, so old entries are not reused. 2: the suite's -updates and
// -security are read, and the locked versions installed.
const formatVersion = "2"

// Options say what OS to build.
type Options struct {
	// Suite is the Debian suite; default "trixie".
	Suite string
	// Mirror overrides the mirror taken from the host's apt configuration;
	// it serves the suite and its -updates.
	Mirror string
	// SecurityMirror overrides the mirror of the suite's -security taken
	// from the host's apt configuration (HostMirror).
	SecurityMirror string
	// Packages are installed besides DefaultPackages.
	Packages []string
	// Locked are exact versions (a lock's os.packages): apt installs each
	// at its version, with the binaries of its source, or the build fails.
	Locked []debs.Package
	// CacheDir is the cache root; default $BOOTSTICK_CACHE, else
	// /var/cache/bootstick.
	CacheDir string
	// Level is the zstd level of the squashfs; default 3 (fast, for
	// development). Releases use higher levels.
	Level int
	// Epoch stamps the squashfs (SOURCE_DATE_EPOCH); zero means the Unix epoch.
	Epoch time.Time
	// Progress gets the steps; nil means none.
	Progress progress.Progress
	// AptRoot is where the host's apt configuration is read; default "/".
	AptRoot string
}

// Result is a finished cache entry.
type Result struct {
	Key      string // hash of the inputs
	Dir      string // the cache entry
	Kernel   string // Dir/vmlinuz
	Initrd   string // Dir/initrd.img
	Squashfs string // Dir/filesystem.squashfs
	Cached   bool   // true when the entry was already there
}

type inputs struct {
	Format         string   `json:"format"`
	Suite          string   `json:"suite"`
	Mirror         string   `json:"mirror"`
	SecurityMirror string   `json:"securityMirror,omitempty"`
	Packages       []string `json:"packages"`
	Locked         []string `json:"locked,omitempty"` // name=version
	Level          int      `json:"level"`
	Epoch          int64    `json:"epoch"`
	// Customize is what is done to the root after its packages, so that a
	// change there builds it again.
	Customize string `json:"customize"`
}

func (o *Options) defaults() error {
	if o.Suite == "" {
		o.Suite = "trixie"
	}
	if o.CacheDir == "" {
		o.CacheDir = cas.DefaultRoot()
	}
	if o.Level == 0 {
		o.Level = 3
	}
	if o.Level < 1 || o.Level > 22 {
		return fmt.Errorf("rootfs: zstd level %d is not between 1 and 22", o.Level)
	}
	if o.Progress == nil {
		o.Progress = progress.Nop()
	}
	if o.AptRoot == "" {
		o.AptRoot = "/"
	}
	src, err := o.sources().Complete(func(suite string) (string, error) { return HostMirror(o.AptRoot, suite) })
	if err != nil {
		return fmt.Errorf("rootfs: %w", err)
	}
	o.Mirror, o.SecurityMirror = src.Mirror, src.SecurityMirror
	return nil
}

func (o Options) sources() debs.Sources {
	return debs.Sources{Suite: o.Suite, Mirror: o.Mirror, SecurityMirror: o.SecurityMirror}
}

func (o Options) inputs() inputs {
	set := map[string]bool{}
	for _, p := range append(append([]string{}, DefaultPackages...), o.Packages...) {
		set[p] = true
	}
	pkgs := make([]string, 0, len(set))
	for p := range set {
		pkgs = append(pkgs, p)
	}
	sort.Strings(pkgs)
	var locked []string
	for _, p := range o.Locked {
		locked = append(locked, p.String())
	}
	sort.Strings(locked)
	return inputs{Format: formatVersion, Suite: o.Suite, Mirror: o.Mirror, SecurityMirror: o.SecurityMirror, Packages: pkgs,
		Locked: locked, Level: o.Level, Epoch: unix(o.Epoch), Customize: customizeHook}
}

// Key is the cache key of the options (after defaults).
func (in inputs) key() string {
	b, _ := json.Marshal(in)
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])[:32]
}

// Build returns the cached OS for opts, building it when it is not there.
func Build(ctx context.Context, opts Options) (Result, error) {
	if err := opts.defaults(); err != nil {
		return Result{}, err
	}
	log := logctx.From(ctx)
	in := opts.inputs()
	key := in.key()
	base := filepath.Join(opts.CacheDir, "rootfs")
	entry := filepath.Join(base, key)
	res := Result{Key: key, Dir: entry, Kernel: filepath.Join(entry, KernelFile),
		Initrd: filepath.Join(entry, InitrdFile), Squashfs: filepath.Join(entry, BaseImage)}
	if complete(entry) {
		res.Cached = true
		return res, nil
	}
	debCache := filepath.Join(base, "debs")
	if err := os.MkdirAll(debCache, 0o755); err != nil {
		return Result{}, fmt.Errorf("rootfs: creating cache %s: %w", base, err)
	}
	unlock, err := lock(ctx, filepath.Join(base, ".lock"))
	if err != nil {
		return Result{}, err
	}
	defer unlock()
	if complete(entry) { // built by someone else while we waited
		res.Cached = true
		return res, nil
	}
	// Leftovers of interrupted builds.
	old, _ := filepath.Glob(filepath.Join(base, ".tmp-*"))
	for _, o := range old {
		if err := safeRemove(o); err != nil {
			return Result{}, fmt.Errorf("rootfs: removing an interrupted build: %w", err)
		}
	}
	tmp, err := os.MkdirTemp(base, ".tmp-"+key+"-")
	if err != nil {
		return Result{}, fmt.Errorf("rootfs: %w", err)
	}
	defer func() {
		if err := safeRemove(tmp); err != nil {
			log.Warn("rootfs: leaving a build folder behind", "dir", tmp, "err", err)
		}
	}()
	root := filepath.Join(tmp, "root")

	start := time.Now()
	opts.Progress.Start("rootfs: mmdebstrap "+strings.Join(opts.sources().Suites(), ", "), -1)
	err = mmdebstrap(ctx, opts, in.Packages, root, debCache)
	opts.Progress.Done()
	if err != nil {
		return Result{}, err
	}
	log.Info("rootfs: mmdebstrap done", "seconds", time.Since(start).Seconds())

	if err := extractBoot(root, tmp); err != nil {
		return Result{}, err
	}
	opts.Progress.Start("rootfs: mksquashfs", -1)
	err = Squash(ctx, root, filepath.Join(tmp, BaseImage), SquashOptions{Level: opts.Level, Epoch: opts.Epoch})
	opts.Progress.Done()
	if err != nil {
		return Result{}, err
	}
	if err := safeRemove(root); err != nil {
		return Result{}, fmt.Errorf("rootfs: removing build root: %w", err)
	}
	meta, _ := json.MarshalIndent(in, "", "  ")
	if err := os.WriteFile(filepath.Join(tmp, "inputs.json"), meta, 0o644); err != nil {
		return Result{}, fmt.Errorf("rootfs: %w", err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return Result{}, fmt.Errorf("rootfs: %w", err)
	}
	if err := syncDir(tmp); err != nil {
		return Result{}, err
	}
	_ = os.RemoveAll(entry) // an incomplete entry from an older layout
	if err := os.Rename(tmp, entry); err != nil {
		return Result{}, fmt.Errorf("rootfs: finishing cache entry: %w", err)
	}
	_ = syncPath(base)
	log.Info("rootfs: built", "entry", entry, "seconds", time.Since(start).Seconds())
	return res, nil
}

// complete says whether a cache entry has all its files. Entries appear by
// rename only, so a partial build is never mistaken for one.
func complete(entry string) bool {
	for _, f := range []string{KernelFile, InitrdFile, BaseImage, "inputs.json"} {
		if fi, err := os.Stat(filepath.Join(entry, f)); err != nil || fi.Size() == 0 {
			return false
		}
	}
	return true
}

// customizeHook is mmdebstrap's hook on the built root ("$1"). A live
// system: no machine-id baked in, systemd makes one at boot. No sshd host
// keys either: openssh-server's install made them, the same on every
// stick of one build cache and readable by anyone holding one; each
// machine makes its own at boot (bootstick-ssh-host-keys.service, before
// sshd).
const customizeHook = `rm -f "$1"/etc/machine-id "$1"/var/lib/dbus/machine-id "$1"/etc/ssh/ssh_host_*; touch "$1"/etc/machine-id`

func mmdebstrap(ctx context.Context, o Options, pkgs []string, root, debCache string) error {
	err := debroot.Mmdebstrap(ctx, debroot.Run{
		Sources: o.sources(), Include: pkgs, Pins: o.Locked, DebCache: debCache, Epoch: o.Epoch,
		Args: []string{"--customize-hook=" + customizeHook},
	}, root)
	if err != nil {
		return fmt.Errorf("rootfs: %w", err)
	}
	return nil
}

// extractBoot copies the newest kernel and its initrd out of root/boot.
func extractBoot(root, dst string) error {
	kernels, _ := filepath.Glob(filepath.Join(root, "boot", "vmlinuz-*"))
	if len(kernels) == 0 {
		return fmt.Errorf("rootfs: no kernel in %s/boot (is linux-image-amd64 in the package list?)", root)
	}
	sort.Strings(kernels)
	k := kernels[len(kernels)-1]
	version := strings.TrimPrefix(filepath.Base(k), "vmlinuz-")
	initrd := filepath.Join(root, "boot", "initrd.img-"+version)
	for _, c := range []struct{ src, dst string }{{k, KernelFile}, {initrd, InitrdFile}} {
		if err := copyFile(c.src, filepath.Join(dst, c.dst)); err != nil {
			return fmt.Errorf("rootfs: extracting %s: %w", c.dst, err)
		}
	}
	return nil
}

// SquashOptions tune mksquashfs.
type SquashOptions struct {
	Level int       // zstd level; default 3
	Epoch time.Time // every date in the image
	// AllRoot makes every file owned by root (for layers staged by a
	// normal user).
	AllRoot bool
}

// Squash makes a squashfs image of dir at out (written to a temporary file
// and renamed).
func Squash(ctx context.Context, dir, out string, o SquashOptions) error {
	if _, err := exec.LookPath("mksquashfs"); err != nil {
		return fmt.Errorf("squashfs: mksquashfs is missing (apt-get install squashfs-tools): %w", err)
	}
	if o.Level == 0 {
		o.Level = 3
	}
	tmp := out + ".tmp"
	_ = os.Remove(tmp)
	epoch := strconv.FormatInt(unix(o.Epoch), 10)
	args := []string{dir, tmp, "-noappend", "-no-progress", "-quiet",
		"-comp", "zstd", "-Xcompression-level", strconv.Itoa(o.Level),
		"-mkfs-time", epoch, "-all-time", epoch, "-no-xattrs"}
	if o.AllRoot {
		args = append(args, "-all-root")
	}
	if _, err := command.Run(ctx, command.Options{}, append([]string{"mksquashfs"}, args...)...); err != nil {
		_ = os.Remove(tmp)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("squashfs: %w", err)
	}
	if err := syncPath(tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, out); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("squashfs: %w", err)
	}
	return nil
}

func lock(ctx context.Context, path string) (func(), error) {
	l, err := flock.Wait(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("rootfs: locking cache: %w", err)
	}
	return func() { l.Release() }, nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func syncPath(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

func syncDir(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.Type().IsRegular() {
			if err := syncPath(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	return syncPath(dir)
}

// safeRemove removes a build folder and what is mounted below it.
func safeRemove(dir string) error { return debroot.SafeRemove(dir) }

// StageLayer lays out the appliance layer in dst: a copy of the overlay
// folder (modes and symbolic links kept, e.g. the wants/ link that enables
// firstboot.service), then files, keyed by their absolute path in the OS and
// giving the host file to copy (the firstboot binary, the Kubernetes
// binaries). Files are copied with their host mode.
func StageLayer(dst, overlay string, files map[string]string) error {
	if overlay != "" {
		err := filepath.WalkDir(overlay, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(overlay, p)
			out := filepath.Join(dst, rel)
			fi, err := d.Info()
			if err != nil {
				return err
			}
			switch {
			case d.IsDir():
				return os.MkdirAll(out, fi.Mode().Perm())
			case d.Type()&os.ModeSymlink != 0:
				target, err := os.Readlink(p)
				if err != nil {
					return err
				}
				return os.Symlink(target, out)
			case d.Type().IsRegular():
				if err := copyFile(p, out); err != nil {
					return err
				}
				return os.Chmod(out, fi.Mode().Perm())
			}
			return fmt.Errorf("%s is a %s; the overlay holds only files, folders and links", p, d.Type())
		})
		if err != nil {
			return fmt.Errorf("staging layer from %s: %w", overlay, err)
		}
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		src := files[n]
		if !filepath.IsAbs(n) {
			return fmt.Errorf("staging layer: %s must be an absolute path in the OS", n)
		}
		fi, err := os.Stat(src)
		if err != nil {
			return fmt.Errorf("staging layer: %w", err)
		}
		out := filepath.Join(dst, n)
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			return fmt.Errorf("staging layer: %w", err)
		}
		if err := copyFile(src, out); err != nil {
			return fmt.Errorf("staging layer: %s: %w", n, err)
		}
		if err := os.Chmod(out, fi.Mode().Perm()); err != nil {
			return fmt.Errorf("staging layer: %w", err)
		}
	}
	return nil
}

// unix is t in Unix seconds; the zero time is the Unix epoch.
func unix(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.Unix()
}
