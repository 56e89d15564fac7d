// Package datadisk prepares the appliance's data disk: the disk the site
// names, or else the first empty disk, formatted once and found by its
// label and mounted on every later boot. Folders that must survive a
// reboot (kubelet's, kubeadm's) are bind-mounted onto it.
//
// Sealed (Options.Seal), the disk is a LUKS2 volume carrying the label,
// with an ext4 file system inside; its key is sealed to the TPM (package
// luks) or kept on the boot stick (package stickkey). Otherwise the disk
// is ext4 itself. A disk found is unlocked the way its header says, and
// mounted.
//
// A disk that is in use (mounted, partitioned, held by another device, or
// carrying a file system or partition table that is not ours) is never
// formatted unless the caller says to wipe that very disk.
package datadisk

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bootstick/bootstick/internal/logctx"

	"github.com/bootstick/bootstick/internal/command"
	"github.com/bootstick/bootstick/internal/luks"
	"github.com/bootstick/bootstick/internal/stickkey"

	"github.com/bootstick/bootstick/internal/mounts"

	"golang.org/x/sys/unix"
)

// DefaultLabel is the data disk's file system label.
const DefaultLabel = "BOOTSTICK-DATA"

// MapperName is the unlocked LUKS2 volume's name (/dev/mapper/bootstick-data).
const MapperName = "bootstick-data"

// DefaultMinSize is the smallest disk taken as a data disk.
const DefaultMinSize = 512 << 20

// Options say which disk to use and where to mount it.
type Options struct {
	// Device is the disk the site names (e.g. /dev/disk/by-id/...); empty
	// means: ours found by label, else the first empty disk.
	Device string
	// Wipe formats Device even when it holds data. It has no effect
	// without Device.
	Wipe bool
	// Label is the file system label (at most 15 bytes); default DefaultLabel.
	Label string
	// Mount is where the disk is mounted, e.g. /var/lib/bootstick.
	Mount string
	// Binds are folders bind-mounted onto the disk: target path ->
	// folder under Mount, e.g. "/var/lib/kubelet" -> "kubelet".
	Binds map[string]string
	// Candidates are the disks considered for "the first empty disk", in
	// order; nil means every disk in /sys/block but loop, RAM, optical,
	// floppy, device-mapper and MD devices.
	Candidates []string
	// Exclude are devices never used (the boot medium), by path.
	Exclude []string
	// MinSize is the smallest usable disk in bytes; default DefaultMinSize.
	MinSize int64
	// Seal says where a new disk's key lives; SealNone formats it plain.
	Seal Seal
	// StickKey is the boot stick's key slot: where SealStick keeps a new
	// disk's key, and where a disk sealed so finds it. Nil when the boot
	// medium has none; NoStickKey then says why.
	StickKey   *stickkey.Slot
	NoStickKey string
	// KeyDir is a folder on a tmpfs where a key lives while cryptsetup
	// needs it.
	KeyDir string
}

// Seal is where a data disk's key lives.
type Seal string

const (
	// SealNone is a plain ext4 disk.
	SealNone Seal = ""
	// SealTPM is a LUKS2 volume whose key is sealed to the TPM.
	SealTPM Seal = "tpm"
	// SealStick is a LUKS2 volume whose key is on the boot stick.
	SealStick Seal = "stick"
)

func (o *Options) defaults() error {
	if o.Label == "" {
		o.Label = DefaultLabel
	}
	if len(o.Label) > 15 {
		return fmt.Errorf("data disk label %q: longer than 15 bytes", o.Label)
	}
	if o.MinSize == 0 {
		o.MinSize = DefaultMinSize
	}
	if !filepath.IsAbs(o.Mount) {
		return fmt.Errorf("data disk mount point %q: not an absolute path", o.Mount)
	}
	return nil
}

// pendingLabel marks a disk while it is being formatted: a disk with it
// was ours when a format was interrupted, and may be formatted again.
func pendingLabel(label string) string {
	l := "~" + label
	if len(l) > 16 {
		l = l[:16]
	}
	return l
}

// Result says what Prepare did.
type Result struct {
	Device    string
	Formatted bool
	// Seal is where the disk's key lives (SealNone: a plain disk).
	Seal Seal
}

// Attach mounts our data disk if one exists (found by its label) and sets
// up the bind mounts. It formats nothing. found is false when there is no
// disk of ours; then nothing is mounted.
func Attach(ctx context.Context, o Options) (dev string, found bool, err error) {
	if err := o.defaults(); err != nil {
		return "", false, err
	}
	dev, found, _, err = attach(ctx, o)
	return dev, found, err
}

// attach is Attach on checked options; it also says where the disk's key
// lives.
func attach(ctx context.Context, o Options) (dev string, found bool, seal Seal, err error) {
	dev, err = FindByLabel(ctx, o.Label)
	if err != nil || dev == "" {
		return "", false, SealNone, err
	}
	fs, seal, err := unlock(ctx, dev, o)
	if err != nil {
		return dev, true, seal, err
	}
	if err := mountAll(ctx, fs, o); err != nil {
		return dev, true, seal, err
	}
	return dev, true, seal, nil
}

// unlock returns the device the file system is on, and where its key
// lives: dev itself for a plain disk, or the LUKS2 volume on it unlocked
// with the TPM or the stick's key, as its header says.
func unlock(ctx context.Context, dev string, o Options) (string, Seal, error) {
	sig, err := probe(ctx, dev)
	if err != nil {
		return "", SealNone, err
	}
	if sig["TYPE"] != "crypto_LUKS" {
		return dev, SealNone, nil
	}
	h, err := luks.ReadHeader(ctx, dev)
	if err != nil {
		return "", SealTPM, err
	}
	seal := SealStick
	if h.TPM2PCRs != nil {
		seal = SealTPM
	}
	if luks.IsOpen(MapperName) {
		return luks.Mapper(MapperName), seal, nil
	}
	start := time.Now()
	var fs string
	if seal == SealTPM {
		fs, err = luks.Open(ctx, dev, MapperName)
	} else {
		fs, err = openWithStickKey(ctx, dev, o)
	}
	if err != nil {
		return "", seal, err
	}
	how := map[Seal]string{SealTPM: "unsealed the data disk's key with the TPM and unlocked it", SealStick: "unlocked the data disk with the key on the boot stick"}[seal]
	logctx.From(ctx).Info(how, "device", dev, "took", time.Since(start).Round(time.Millisecond))
	return fs, seal, nil
}

func openWithStickKey(ctx context.Context, dev string, o Options) (string, error) {
	if o.StickKey == nil {
		return "", fmt.Errorf("the data disk %s keeps its key on the stick that formatted it (no TPM sealed it), and this boot medium has no key slot (%s): boot from that stick", dev, o.NoStickKey)
	}
	key, err := o.StickKey.Load()
	if err != nil {
		return "", err
	}
	if key == nil {
		return "", fmt.Errorf("the data disk %s keeps its key on the stick that formatted it (no TPM sealed it), and this stick's key slot is blank: boot from that stick", dev)
	}
	return luks.OpenWithKey(ctx, dev, MapperName, key)
}

// Prepare makes sure the data disk is formatted, mounted at o.Mount and the
// bind mounts are in place. It is safe to run again at any point.
func Prepare(ctx context.Context, o Options) (Result, error) {
	if err := o.defaults(); err != nil {
		return Result{}, err
	}
	if dev, found, seal, err := attach(ctx, o); err != nil {
		return Result{Device: dev}, err
	} else if found {
		if o.Device != "" {
			if want, err := filepath.EvalSymlinks(o.Device); err == nil && want != dev {
				logctx.From(ctx).Warn("the site names one data disk, but another carries our label; using the labelled one",
					"site", o.Device, "labelled", dev)
			}
		}
		return Result{Device: dev, Seal: seal}, nil
	}
	// A volume open while no disk carries our label is an interrupted
	// format's, in this boot: lock it, so the disk counts as free.
	if err := luks.Close(ctx, MapperName); err != nil {
		return Result{}, err
	}
	dev, err := choose(ctx, o)
	if err != nil {
		return Result{}, err
	}
	logctx.From(ctx).Info("formatting the data disk", "device", dev, "label", o.Label)
	fs, err := format(ctx, dev, o)
	if err != nil {
		return Result{Device: dev, Seal: o.Seal}, err
	}
	res := Result{Device: dev, Formatted: true, Seal: o.Seal}
	if err := mountAll(ctx, fs, o); err != nil {
		return res, err
	}
	return res, nil
}

// choose picks the disk to format.
func choose(ctx context.Context, o Options) (string, error) {
	excluded := map[string]bool{}
	for _, x := range o.Exclude {
		if r, err := filepath.EvalSymlinks(x); err == nil {
			excluded[r] = true
		}
	}
	if o.Device != "" {
		dev, err := filepath.EvalSymlinks(o.Device)
		if err != nil {
			return "", fmt.Errorf("data disk %s (bootstrap.dataDisk): %w", o.Device, err)
		}
		if excluded[dev] {
			return "", fmt.Errorf("data disk %s (bootstrap.dataDisk) is the boot medium; name another disk", o.Device)
		}
		u, err := Inspect(ctx, dev, o.Label)
		if err != nil {
			return "", err
		}
		if u.Size < o.MinSize {
			return "", fmt.Errorf("data disk %s (bootstrap.dataDisk): %d MiB, smaller than %d MiB", o.Device, u.Size>>20, o.MinSize>>20)
		}
		if u.Mounted || u.ReadOnly {
			return "", fmt.Errorf("data disk %s (bootstrap.dataDisk) is in use: %s; free it, or name another disk", o.Device, u.Why())
		}
		if !u.Empty() && !o.Wipe {
			return "", fmt.Errorf("data disk %s (bootstrap.dataDisk) is in use: %s; to erase it, wipe it yourself (wipefs -a %s) or allow firstboot to (--wipe-data-disk)",
				o.Device, u.Why(), o.Device)
		}
		return dev, nil
	}
	cands := o.Candidates
	if cands == nil {
		var err error
		if cands, err = systemDisks(); err != nil {
			return "", err
		}
	}
	var why []string
	for _, c := range cands {
		dev, err := filepath.EvalSymlinks(c)
		if err != nil {
			why = append(why, fmt.Sprintf("%s: %v", c, err))
			continue
		}
		if excluded[dev] {
			why = append(why, dev+": the boot medium")
			continue
		}
		u, err := Inspect(ctx, dev, o.Label)
		if err != nil {
			why = append(why, fmt.Sprintf("%s: %v", dev, err))
			continue
		}
		switch {
		case u.Size < o.MinSize:
			why = append(why, fmt.Sprintf("%s: %d MiB, smaller than %d MiB", dev, u.Size>>20, o.MinSize>>20))
		case !u.Empty() || u.Mounted || u.ReadOnly:
			why = append(why, fmt.Sprintf("%s: in use (%s)", dev, u.Why()))
		default:
			return dev, nil
		}
	}
	if len(why) == 0 {
		return "", errors.New("no data disk: this machine has no disk besides the boot medium; add one (it is formatted, and keeps the cluster's state)")
	}
	return "", fmt.Errorf("no empty data disk (%s); name one in the site's bootstrap.dataDisk, or wipe one", strings.Join(why, "; "))
}

// Usage is what Inspect found on a disk.
type Usage struct {
	Device     string
	Size       int64
	ReadOnly   bool
	Mounted    bool
	Partitions []string
	Holders    []string
	// FSType and PTType are the signatures blkid found ("" for none);
	// Label is the file system's label.
	FSType, PTType, Label string
	// Pending is set when the disk carries our interrupted-format label.
	Pending bool
}

// Empty reports whether the disk holds nothing: no partitions, no holders,
// no signature (or only our own interrupted format).
func (u Usage) Empty() bool {
	if u.Pending {
		return len(u.Partitions) == 0 && len(u.Holders) == 0
	}
	return len(u.Partitions) == 0 && len(u.Holders) == 0 && u.FSType == "" && u.PTType == ""
}

// Why says in words why a disk is not empty.
func (u Usage) Why() string {
	var r []string
	if u.Mounted {
		r = append(r, "mounted")
	}
	if u.ReadOnly {
		r = append(r, "read-only")
	}
	if len(u.Partitions) > 0 {
		r = append(r, "partitions "+strings.Join(u.Partitions, ", "))
	}
	if len(u.Holders) > 0 {
		r = append(r, "held by "+strings.Join(u.Holders, ", "))
	}
	if u.PTType != "" {
		r = append(r, "a "+u.PTType+" partition table")
	}
	if u.FSType != "" && !u.Pending {
		s := "a " + u.FSType + " file system"
		if u.Label != "" {
			s += fmt.Sprintf(" labelled %q", u.Label)
		}
		r = append(r, s)
	}
	if len(r) == 0 {
		return "empty"
	}
	return strings.Join(r, ", ")
}

// Inspect looks at a whole disk: its partitions, holders, mounts and
// signatures.
func Inspect(ctx context.Context, dev, label string) (Usage, error) {
	u := Usage{Device: dev}
	var st syscall.Stat_t
	if err := syscall.Stat(dev, &st); err != nil {
		return u, fmt.Errorf("%s: %w", dev, err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFBLK {
		return u, fmt.Errorf("%s: not a block device", dev)
	}
	name := filepath.Base(dev)
	sys := filepath.Join("/sys/class/block", name)
	if _, err := os.Stat(filepath.Join(sys, "partition")); err == nil {
		return u, fmt.Errorf("%s is a partition; name the whole disk", dev)
	}
	if n, err := readInt(filepath.Join(sys, "size")); err == nil {
		u.Size = n * 512
	}
	if n, err := readInt(filepath.Join(sys, "ro")); err == nil && n == 1 {
		u.ReadOnly = true
	}
	devs := []string{devno(st.Rdev)}
	entries, _ := os.ReadDir(sys)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), name) {
			if _, err := os.Stat(filepath.Join(sys, e.Name(), "partition")); err == nil {
				u.Partitions = append(u.Partitions, e.Name())
				if d, err := os.ReadFile(filepath.Join(sys, e.Name(), "dev")); err == nil {
					devs = append(devs, strings.TrimSpace(string(d)))
				}
			}
		}
	}
	holders, _ := os.ReadDir(filepath.Join(sys, "holders"))
	for _, h := range holders {
		u.Holders = append(u.Holders, h.Name())
	}
	u.Mounted = mountedDevice(devs)
	sig, err := probe(ctx, dev)
	if err != nil {
		return u, err
	}
	u.FSType, u.PTType, u.Label = sig["TYPE"], sig["PTTYPE"], sig["LABEL"]
	u.Pending = label != "" && u.Label == pendingLabel(label)
	return u, nil
}

// probe runs blkid in low-level probing mode (no cache): the signatures on
// the device itself.
func probe(ctx context.Context, dev string) (map[string]string, error) {
	out, err := command.Output(ctx, command.Options{}, "blkid", "-p", "-o", "export", dev)
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 2 {
		return map[string]string{}, nil // nothing found
	}
	if err != nil {
		return nil, fmt.Errorf("probing %s: %w", dev, err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			m[k] = v
		}
	}
	return m, nil
}

// FindByLabel returns the device whose file system carries label, or "".
// Two such devices are an error.
func FindByLabel(ctx context.Context, label string) (string, error) {
	out, err := command.Output(ctx, command.Options{}, "blkid", "-c", "/dev/null", "-o", "device", "-t", "LABEL="+label)
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 2 {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("looking for the data disk (label %s): %w", label, err)
	}
	devs := strings.Fields(string(out))
	switch len(devs) {
	case 0:
		return "", nil
	case 1:
		return devs[0], nil
	}
	return "", fmt.Errorf("several disks are labelled %s (%s): remove or relabel all but one", label, strings.Join(devs, ", "))
}

// format formats dev and returns the device its file system is on. The
// final label is set only once everything else is done: a disk killed
// mid-format carries the pending label, and is formatted again.
func format(ctx context.Context, dev string, o Options) (string, error) {
	run := func(argv ...string) error {
		if _, err := command.Run(ctx, command.Options{}, argv...); err != nil {
			return fmt.Errorf("formatting %s: %w", dev, err)
		}
		return nil
	}
	if o.Wipe && o.Device != "" {
		if err := run("wipefs", "-a", dev); err != nil {
			return "", err
		}
	}
	mkfs := []string{"mkfs.ext4", "-F", "-q", "-E", "lazy_itable_init=1,lazy_journal_init=1"}
	if o.Seal == SealNone {
		if err := run(append(mkfs, "-L", pendingLabel(o.Label), dev)...); err != nil {
			return "", err
		}
		return dev, run("e2label", dev, o.Label)
	}
	key, err := newKey(o)
	if err != nil {
		return "", err
	}
	defer clear(key)
	if err := luks.Format(ctx, dev, pendingLabel(o.Label), o.KeyDir, key, o.Seal == SealTPM); err != nil {
		return "", err
	}
	// Unlocking at once the way every later boot will proves the seal
	// before anything is written inside.
	fs, _, err := unlock(ctx, dev, o)
	if err != nil {
		return "", err
	}
	if err := run(append(mkfs, fs)...); err != nil {
		return "", err
	}
	return fs, luks.SetLabel(ctx, dev, o.Label)
}

// newKey is a new disk's key: random, and for SealStick the one on the
// stick (kept there first, so a format cut short uses it again; a stick
// that formatted another disk already keeps its key).
func newKey(o Options) ([]byte, error) {
	if o.Seal != SealStick {
		return luks.NewKey()
	}
	if o.StickKey == nil {
		return nil, fmt.Errorf("keeping the data disk's key on the stick: the boot medium has no key slot (%s)", o.NoStickKey)
	}
	key, err := o.StickKey.Load()
	if err != nil || key != nil {
		return key, err
	}
	if key, err = luks.NewKey(); err != nil {
		return nil, err
	}
	return key, o.StickKey.Store(key)
}

// mountAll mounts dev at o.Mount (unless something is mounted there) and
// sets up the bind mounts.
func mountAll(ctx context.Context, dev string, o Options) error {
	if err := os.MkdirAll(o.Mount, 0o755); err != nil {
		return fmt.Errorf("mounting the data disk: %w", err)
	}
	if !MountedAt(o.Mount) {
		if err := syscall.Mount(dev, o.Mount, "ext4", syscall.MS_NOATIME, ""); err != nil {
			return fmt.Errorf("mounting the data disk %s at %s: %w", dev, o.Mount, err)
		}
		logctx.From(ctx).Info("mounted the data disk", "device", dev, "at", o.Mount)
	}
	targets := make([]string, 0, len(o.Binds))
	for t := range o.Binds {
		targets = append(targets, t)
	}
	sort.Strings(targets)
	for _, t := range targets {
		src := filepath.Join(o.Mount, o.Binds[t])
		if err := os.MkdirAll(src, 0o755); err != nil {
			return fmt.Errorf("bind-mounting %s: %w", t, err)
		}
		if err := os.MkdirAll(t, 0o755); err != nil {
			return fmt.Errorf("bind-mounting %s: %w", t, err)
		}
		if MountedAt(t) {
			continue
		}
		if err := syscall.Mount(src, t, "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind-mounting %s onto %s: %w", t, src, err)
		}
	}
	return nil
}

// Detach undoes Attach: the bind mounts, then the disk.
func Detach(o Options) error {
	var errs []error
	for t := range o.Binds {
		if MountedAt(t) {
			if err := syscall.Unmount(t, 0); err != nil {
				errs = append(errs, fmt.Errorf("unmounting %s: %w", t, err))
			}
		}
	}
	if MountedAt(o.Mount) {
		if err := syscall.Unmount(o.Mount, 0); err != nil {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", o.Mount, err))
		}
	}
	if len(errs) == 0 {
		errs = append(errs, luks.Close(context.Background(), MapperName))
	}
	return errors.Join(errs...)
}

// MountedAt reports whether something is mounted at dir.
func MountedAt(dir string) bool {
	return mounts.Mounted(dir)
}

// SourceOf returns the device mounted at dir (e.g. the boot medium at
// /run/live/medium), or "".
func SourceOf(dir string) string {
	m, _ := mounts.At(dir)
	return m.Source
}

func mountedDevice(devnos []string) bool {
	list, _ := mounts.List()
	for _, m := range list {
		for _, d := range devnos {
			if m.Device == d {
				return true
			}
		}
	}
	// Swap is not in mountinfo.
	if data, err := os.ReadFile("/proc/swaps"); err == nil {
		for _, line := range strings.Split(string(data), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) == 0 {
				continue
			}
			var st syscall.Stat_t
			if syscall.Stat(f[0], &st) == nil {
				for _, d := range devnos {
					if devno(st.Rdev) == d {
						return true
					}
				}
			}
		}
	}
	return false
}

// systemDisks lists the whole disks a data disk may be, in name order.
func systemDisks() ([]string, error) {
	entries, err := os.ReadDir("/sys/block")
	if err != nil {
		return nil, fmt.Errorf("listing disks: %w", err)
	}
	var out []string
	for _, e := range entries {
		n := e.Name()
		skip := false
		for _, p := range []string{"loop", "ram", "zram", "sr", "fd", "dm-", "md", "nbd", "zd"} {
			if strings.HasPrefix(n, p) {
				skip = true
			}
		}
		if !skip {
			out = append(out, "/dev/"+n)
		}
	}
	return out, nil
}

// DiskOf returns the whole disk a device belongs to (a partition's
// parent), or the device itself.
func DiskOf(dev string) string {
	r, err := filepath.EvalSymlinks(dev)
	if err != nil {
		return dev
	}
	name := filepath.Base(r)
	if _, err := os.Stat(filepath.Join("/sys/class/block", name, "partition")); err == nil {
		if link, err := filepath.EvalSymlinks(filepath.Join("/sys/class/block", name)); err == nil {
			return "/dev/" + filepath.Base(filepath.Dir(link))
		}
	}
	return r
}

func readInt(p string) (int64, error) {
	data, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
}

func devno(rdev uint64) string { return fmt.Sprintf("%d:%d", unix.Major(rdev), unix.Minor(rdev)) }
