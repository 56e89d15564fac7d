package stick

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/bootstick/bootstick/internal/bundle"
	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/debs"
	"github.com/bootstick/bootstick/internal/fetch"
	"github.com/bootstick/bootstick/internal/iso"
	"github.com/bootstick/bootstick/internal/logctx"
	"github.com/bootstick/bootstick/internal/preflight"
	"github.com/bootstick/bootstick/internal/rootfs"
	"github.com/bootstick/bootstick/internal/site"
	"github.com/bootstick/bootstick/internal/stickkey"
	"github.com/bootstick/bootstick/internal/toolchain"
	"github.com/bootstick/bootstick/internal/zstdblob"
)

// builder is one Build: its options, and what each step leaves for the
// steps after it.
type builder struct {
	o   Options
	log *slog.Logger
	res *Result

	b          *bundle.Bundle
	prev, lock *bundle.Lock
	// st is the site the stick carries (nil for none), and siteFiles the
	// files it names.
	st        *site.Site
	siteFiles []string
	osr       OSResult
	layer     cas.Digest
	tree      string // the ISO's tree, in a work folder of the store
}

// spinners are the labels of the steps that show a spinner; the others
// show bars of their own, or are quick.
var spinners = map[string]string{
	"completeness": "checking that the registry holds every image",
	"layer":        "building the appliance layer",
	"payload":      "staging /bundle (re-hashing what comes from the cache)",
}

// Build runs the whole pipeline: it checks the tools, the output and the
// bundle first, then resolves the lock, and then, holding the store,
// fetches, checks, builds and writes, one named step after the other
// (Result.Steps times each).
func Build(ctx context.Context, o Options) (*Result, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	x := &builder{o: o, log: logctx.From(ctx), res: &Result{Output: o.Output, LockFile: o.Lock}}
	if err := x.prepare(); err != nil {
		return nil, err
	}
	// The toolchain (resolve builds it) takes the store itself.
	if err := x.step(ctx, "resolve", x.resolve); err != nil {
		return nil, err
	}
	unlock, err := o.Store.Lock(true)
	if err != nil {
		return nil, err
	}
	defer unlock()
	// Work folders of a build that was killed (ours are removed on return).
	if err := o.Store.Clean(); err != nil {
		return nil, err
	}
	work, err := o.Store.TempDir("stick-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	x.tree = filepath.Join(work, "tree")
	for _, s := range []struct {
		name string
		run  func(context.Context) error
	}{
		{"fetch", x.fetch}, {"site", x.loadSite}, {"completeness", x.completeness}, {"os", x.buildOS},
		{"layer", x.buildLayer}, {"payload", x.payload}, {"iso", x.writeISO},
	} {
		if s.name == "site" && o.Site == "" {
			continue
		}
		if err := x.step(ctx, s.name, s.run); err != nil {
			return nil, err
		}
	}
	if fi, err := os.Stat(o.Output); err == nil {
		x.res.Size = fi.Size()
	}
	return x.res, nil
}

// step runs one named step, timed, with a spinner where it has one.
func (x *builder) step(ctx context.Context, name string, f func(context.Context) error) error {
	start := time.Now()
	label := spinners[name]
	if label != "" {
		x.o.Progress.Start(label, -1)
	}
	err := f(ctx)
	if label != "" {
		x.o.Progress.Done()
	}
	x.res.Steps = append(x.res.Steps, Step{name, time.Since(start)})
	if err == nil {
		x.log.Info("step done", "step", name, "took", time.Since(start).Round(10*time.Millisecond))
	}
	return err
}

// prepare checks the tools and the output location (a build that cannot
// finish fails before it spends minutes), reads the bundle and the lock
// there is, and sets up apt for the bundle's suite.
func (x *builder) prepare() error {
	o := &x.o
	if err := preflight.Check(Needs()...); err != nil {
		return err
	}
	if err := checkOutput(o.Output); err != nil {
		return err
	}
	b, err := bundle.Load(o.Bundle)
	if err != nil {
		return err
	}
	x.b = b
	if o.Debs == nil || o.FetchDebs == nil {
		// The OS's and the compute nodes' packages come from the bundle's
		// suite with its -updates and -security, read through an apt
		// configuration of mkusb's own.
		src, err := b.OS.Sources(o.Mirror)
		if err != nil {
			return fmt.Errorf("bundle %s: os: %w", b.File, err)
		}
		apt := &debs.Apt{Sources: src, Dir: filepath.Join(o.Store.Root, "apt")}
		if o.Debs == nil {
			o.Debs = apt.Resolve
		}
		if o.FetchDebs == nil {
			o.FetchDebs = apt.Fetch
		}
	}
	if x.prev, err = bundle.ReadLock(o.Lock); err != nil {
		return err
	}
	if o.Locked && x.prev == nil {
		return fmt.Errorf("--locked: there is no lock %s: build once without --locked to make it", o.Lock)
	}
	return nil
}

// resolve makes the lock (building the toolchain when the bundle takes
// Kubernetes from it) and writes it when it changed; a locked build fails
// instead.
func (x *builder) resolve(ctx context.Context) error {
	o, b := x.o, x.b
	r := bundle.Resolver{Debs: o.Debs, Mirror: o.Mirror, OSPackages: rootfs.DefaultPackages,
		// The compute nodes' binaries travel compressed: kubeadm,
		// kubelet and kubectl are a quarter of their size in zstd.
		Compress: func(ctx context.Context, f bundle.LockedFile) (bundle.Compressed, error) {
			if err := storeFile(ctx, o, b, f); err != nil {
				return bundle.Compressed{}, err
			}
			c, err := zstdblob.Of(ctx, o.Store, f.SHA256)
			return bundle.Compressed{SHA256: c.SHA256, Size: c.Size}, err
		}}
	if b.Kubernetes.FromToolchain() {
		r.Toolchain = func(ctx context.Context, recipesFile string) (*toolchain.Manifest, error) {
			tc, err := o.Toolchain(ctx, recipesFile)
			if err != nil {
				return nil, err
			}
			return &tc.Manifest, nil
		}
	}
	if !o.Locked {
		r.Download = func(ctx context.Context, url string) (cas.Digest, int64, error) {
			f := &fetch.Fetcher{Store: o.Store, Progress: o.Progress, Client: o.HTTPClient}
			rs, err := f.Fetch(ctx, []fetch.Item{{URL: url}})
			if err != nil {
				return "", 0, err
			}
			return rs[0].SHA256, rs[0].Size, nil
		}
		r.ImageDigest = func(ctx context.Context, ref string) (cas.Digest, error) {
			return fetch.PullImage(ctx, o.Store, ref, "", o.RemoteOptions...)
		}
	}
	lock, err := bundle.Resolve(ctx, b, x.prev, r)
	if err != nil {
		return err
	}
	if len(lock.Unresolved) > 0 {
		return fmt.Errorf("the lock leaves %d entries unresolved:\n  %s", len(lock.Unresolved), strings.Join(lock.Unresolved, "\n  "))
	}
	var diff []string
	if x.prev != nil {
		diff = bundle.Diff(x.prev, lock)
	}
	if o.Locked && len(diff) > 0 {
		return fmt.Errorf("--locked: the bundle no longer matches %s:\n  %s\nbuild without --locked to update the lock", o.Lock, strings.Join(diff, "\n  "))
	}
	if x.prev == nil || len(diff) > 0 {
		x.res.LockChanged = true
		if err := bundle.WriteLock(o.Lock, lock); err != nil {
			return err
		}
		x.log.Info("lock written", "file", o.Lock, "changes", len(diff))
	}
	x.lock, x.res.Lock = lock, lock
	for _, m := range lock.LeftOut {
		x.log.Warn("manifest left out: the bundle's registry lacks its images (manifests.ifImagesPresent)",
			"manifest", m.Name, "missing", strings.Join(m.Missing, ", "))
	}
	return nil
}

// fetch puts every file the lock pins into the store.
func (x *builder) fetch(ctx context.Context) error { return fetchAll(ctx, x.o, x.b, x.lock) }

// loadSite reads the site the stick carries, validated against the
// bundle's OS images and plugins.
func (x *builder) loadSite(ctx context.Context) error {
	var err error
	x.st, x.siteFiles, err = loadSite(ctx, x.o.Site, x.o.AgeIdentity, x.o.AllowCleartext, x.lock.BundledImages(), x.lock.PluginNames())
	return err
}

// completeness checks that the registry holds every image the manifests
// and the site name.
func (x *builder) completeness(ctx context.Context) error {
	return checkComplete(ctx, x.o, x.b, x.lock, x.st, x.lock.BundledImages())
}

// buildOS builds the live OS with exactly the versions the lock pins.
func (x *builder) buildOS(ctx context.Context) error {
	o, lock := x.o, x.lock
	names := append([]string(nil), x.b.OS.Packages...)
	warnMoved(ctx, o, lock)
	// The locked versions, exactly: a newer one the mirrors serve now (a
	// security update) changes nothing until the lock does.
	var err error
	x.osr, err = o.OS(ctx, OSRequest{Suite: lock.OS.Suite, Mirror: lock.OS.Mirror, SecurityMirror: lock.OS.SecurityMirror,
		Packages: names, Locked: lock.OS.Packages,
		Level: lock.OS.CompressionLevel, Epoch: o.Epoch, CacheDir: o.Store.Root, Progress: o.Progress})
	if err != nil && len(lock.OS.Packages) > 0 && ctx.Err() == nil {
		return fmt.Errorf("%w\nthe OS installs exactly the versions %s pins (os.packages): where apt could not find or install one, the mirrors no longer serve it; delete the lock (or its os.packages) to lock their current versions", err, o.Lock)
	}
	return err
}

// buildLayer builds the appliance layer (firstboot and the overlay).
func (x *builder) buildLayer(ctx context.Context) error {
	var err error
	x.layer, err = buildLayer(ctx, x.o, x.lock)
	return err
}

// payload stages the ISO's tree: the OS, the layer and /bundle.
func (x *builder) payload(ctx context.Context) error {
	return stageTree(ctx, x.o, x.b, x.lock, x.osr, x.layer, x.tree, x.siteFiles, &x.res.Payload)
}

// writeISO writes the hybrid ISO from the tree (a temporary file, renamed
// when whole).
func (x *builder) writeISO(ctx context.Context) error {
	o := x.o
	o.Progress.Start("writing "+filepath.Base(o.Output), -1)
	defer o.Progress.Done()
	label := Label(x.b.Name)
	boot, err := iso.StageBoot(ctx, iso.BootOptions{Tree: x.tree, Label: label, Epoch: o.Epoch, Title: "bootstick " + x.b.Name})
	if err != nil {
		return err
	}
	mode := os.FileMode(0o644)
	if o.Site != "" {
		mode = 0o600 // the site's credentials, CA and networks
	}
	// A dd'd stick keeps the data disk's key when the machine has no TPM
	// (package stickkey): a blank slot after the ISO.
	boot.Appended, boot.AppendedType = stickkey.Blank(), stickkey.PartitionType
	return iso.Write(ctx, iso.Options{Tree: x.tree, Output: o.Output, Label: label, Epoch: o.Epoch, Boot: &boot, Mode: mode})
}
