// Package stick is `mkusb build`: it turns a bundle into the bootable ISO.
//
//	resolve → lock → toolchain → fetch → completeness → OS (rootfs) →
//	appliance layer → payload (/bundle) → ISO (temp file, renamed)
//
// Every artifact comes from the content-addressed cache; what is not there
// is built or downloaded into it first. A locked build (Options.Locked)
// fails instead of changing the lock, so it downloads nothing that the lock
// does not pin, and every file read from the cache is re-hashed against it.
package stick

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/bootstick/bootstick/internal/bundle"
	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/debs"
	"github.com/bootstick/bootstick/internal/iso"
	"github.com/bootstick/bootstick/internal/logctx"
	"github.com/bootstick/bootstick/internal/payload"
	"github.com/bootstick/bootstick/internal/preflight"
	"github.com/bootstick/bootstick/internal/progress"
	"github.com/bootstick/bootstick/internal/recipes"
	"github.com/bootstick/bootstick/internal/rootfs"
	"github.com/bootstick/bootstick/internal/toolchain"
)

// Options say what to build.
type Options struct {
	Bundle string // the bundle file
	Lock   string // its lock; default bundle.LockPath(Bundle)
	// Locked fails when the lock is missing, would change, or leaves
	// anything unresolved.
	Locked bool
	Output string
	Store  *cas.Store
	// Site is a site file to validate and embed; AgeIdentity decrypts its
	// encrypted passwords. AllowCleartext lets the site carry BMC
	// passwords in clear text (refused without it). An ISO that carries a
	// site is written 0600.
	Site, AgeIdentity string
	AllowCleartext    bool
	Epoch             time.Time
	Progress          progress.Progress
	// Firstboot is the firstboot binary put into the appliance layer;
	// Overlay the folder laid over the OS.
	Firstboot, Overlay string

	// The slow or external parts; nil means the real ones. Tests and
	// benchmarks replace them.
	Toolchain     func(ctx context.Context, recipesFile string) (*toolchain.Result, error)
	OS            func(ctx context.Context, req OSRequest) (OSResult, error)
	Debs          func(ctx context.Context, names []string) ([]debs.Package, error)
	FetchDebs     func(ctx context.Context, store *cas.Store, pkgs []debs.Package, workDir string) error
	Mirror        func(suite string) (string, error) // of a suite, and of SUITE-security, where the bundle names none
	KubeadmImages func(ctx context.Context, config []byte) ([]string, error)
	HTTPClient    *http.Client
	RemoteOptions []remote.Option
}

// OSRequest is the Debian live OS to build.
type OSRequest struct {
	Suite, Mirror, SecurityMirror string
	Packages                      []string
	Locked                        []debs.Package // the lock's versions, which the OS installs exactly
	Level                         int
	Epoch                         time.Time
	CacheDir                      string
	Progress                      progress.Progress
}

// rootfsOptions are the options of package rootfs that build the OS.
func (req OSRequest) rootfsOptions() rootfs.Options {
	return rootfs.Options{Suite: req.Suite, Mirror: req.Mirror, SecurityMirror: req.SecurityMirror,
		Packages: req.Packages, Locked: req.Locked,
		CacheDir: req.CacheDir, Level: req.Level, Epoch: req.Epoch, Progress: req.Progress}
}

// OSResult is the built OS: host paths of its kernel, initrd and squashfs.
type OSResult struct {
	Kernel, Initrd, Squashfs string
}

// Result says what was built.
type Result struct {
	Lock        *bundle.Lock
	LockFile    string
	LockChanged bool
	Output      string
	Size        int64
	Payload     payload.Stats
	// Steps are the steps' names and durations, in order.
	Steps []Step
}

// Step is one timed step.
type Step struct {
	Name string
	Took time.Duration
}

// BuildInfo is /bundle/build.json: what the lock cannot pin because it is
// built (the OS and the appliance layer), by digest.
type BuildInfo struct {
	SourceDateEpoch int64                 `json:"sourceDateEpoch"`
	Live            map[string]cas.Digest `json:"live"`
	Site            cas.Digest            `json:"site,omitempty"`
}

// Needs are the programs and files a build runs: the toolchain's, the
// live OS's (mmdebstrap, mksquashfs) and the boot loaders'.
func Needs() []preflight.Need {
	return append(toolchain.Needs(),
		preflight.Program("mmdebstrap", "mmdebstrap"),
		preflight.Program("mksquashfs", "squashfs-tools"),
		preflight.Program("unsquashfs", "squashfs-tools"),
		preflight.Program("grub-mkimage", "grub-common"),
		preflight.File(iso.DefaultISOLinux, "isolinux"),
		preflight.File(iso.DefaultMBR, "isolinux"),
		preflight.File(iso.DefaultLDLinux, "syslinux-common"),
		preflight.File(iso.DefaultGrubEFIDir+"/linux.mod", "grub-efi-amd64-bin"),
	)
}

// warnMoved warns when the mirrors now offer other versions of the OS
// packages than the lock pins (a security or stable update): the OS
// installs the locked versions, so the lock must be made again to take
// them.
func warnMoved(ctx context.Context, o Options, l *bundle.Lock) {
	var names []string
	for _, p := range l.OS.Packages {
		names = append(names, p.Name)
	}
	now, err := o.Debs(ctx, names)
	if err != nil {
		return
	}
	locked := map[string]string{}
	for _, p := range l.OS.Packages {
		locked[p.Name] = p.Version
	}
	for _, p := range now {
		if v := locked[p.Name]; v != p.Version {
			logctx.From(ctx).Warn("the mirror serves another version than the lock pins; the OS installs the locked one (delete the lock to take the new one)",
				"package", p.Name, "locked", v, "mirror", p.Version, "suite", p.Suite)
		}
	}
}

var labelBad = regexp.MustCompile(`[^A-Z0-9_]`)

// Label is the ISO volume label for a bundle name.
func Label(name string) string {
	l := labelBad.ReplaceAllString(strings.ToUpper(name), "_")
	if len(l) > 32 {
		l = l[:32]
	}
	if l == "" {
		l = "BOOTSTICK"
	}
	return l
}

func (o *Options) defaults() error {
	if o.Bundle == "" {
		return errors.New("no bundle file given")
	}
	if o.Output == "" {
		return errors.New("no output file given")
	}
	if o.Store == nil {
		return errors.New("no cache given")
	}
	if o.Lock == "" {
		o.Lock = bundle.LockPath(o.Bundle)
	}
	if o.Progress == nil {
		o.Progress = progress.Nop()
	}
	if o.Toolchain == nil {
		o.Toolchain = func(ctx context.Context, recipesFile string) (*toolchain.Result, error) {
			spec, err := recipes.Load(recipesFile)
			if err != nil {
				return nil, err
			}
			o.Progress.Start("toolchain (Kubernetes, etcd, CoreDNS, pause from source)", -1)
			defer o.Progress.Done()
			return toolchain.Build(ctx, toolchain.Options{Spec: spec, Store: o.Store, Epoch: o.Epoch, Mirror: o.Mirror})
		}
	}
	if o.OS == nil {
		o.OS = func(ctx context.Context, req OSRequest) (OSResult, error) {
			r, err := rootfs.Build(ctx, req.rootfsOptions())
			if err != nil {
				return OSResult{}, err
			}
			return OSResult{Kernel: r.Kernel, Initrd: r.Initrd, Squashfs: r.Squashfs}, nil
		}
	}
	if o.Mirror == nil {
		o.Mirror = func(suite string) (string, error) { return rootfs.HostMirror("/", suite) }
	}
	return nil
}

// checkOutput fails early when the output's folder is missing or not
// writable.
func checkOutput(out string) error {
	dir := filepath.Dir(out)
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("output %s: %w (create the folder first)", out, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("output %s: %s is not a folder", out, dir)
	}
	f, err := os.CreateTemp(dir, ".mkusb-probe-*")
	if err != nil {
		return fmt.Errorf("output %s: cannot write in %s (choose a writable --output): %w", out, dir, err)
	}
	f.Close()
	os.Remove(f.Name())
	return nil
}
