package firstboot

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/bootstick/bootstick/internal/bundle"
	"github.com/bootstick/bootstick/internal/pipeline"

	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/kindcluster"
	"github.com/bootstick/bootstick/internal/logctx"
	"github.com/bootstick/bootstick/internal/registry"
	"github.com/bootstick/bootstick/internal/site"
	"github.com/bootstick/bootstick/internal/sitestore"
	"github.com/bootstick/bootstick/internal/supervise"
)

// node is what the discovery pass found before the runner starts: every
// step gets it and none changes it. What discovery could not find is kept
// as an error and returned by the step that owns it (bundle, preflight),
// so it is recorded in the state with that step's hint.
type node struct {
	opts     runOptions
	paths    paths
	services supervise.Manager

	bundle    bundleInfo
	bundleErr error

	// sitePath is --site, else the site in the bundle, else "".
	sitePath string
	// early is the site's bootstrap part (nil without a site).
	early    *site.Early
	earlyErr error

	// kubeconfig reaches the cluster: kubeadm's admin.conf, or kind's own.
	kubeconfig string

	// engine is the container engine, in kind mode.
	engine    kindcluster.Engine
	engineErr error

	// interrupted is the step an earlier run was inside when it stopped
	// (killed, or the power cut), as the state file says; "" if none.
	interrupted string
}

// bundleInfo is the bundle's folder and its OCI layout's contents.
type bundleInfo struct {
	dir        string // the bundle's folder (an ISO's is mounted)
	layout     string
	images     []string
	registries []string
	has        func(ref string) bool // whether the bundle's registry serves ref
	// digest is the manifest digest of a ref's tag in the layout.
	digest func(ref string) (string, bool)
}

// discover finds the bundle (mounting an ISO), opens its layout, finds the
// site and, in kind mode, the container engine.
func discover(ctx context.Context, o runOptions, p paths, services supervise.Manager) *node {
	n := &node{opts: o, paths: p, services: services, kubeconfig: adminConf}
	if st, err := pipeline.LoadState(pipeline.StatePath(p.State)); err == nil {
		for _, r := range st.Steps {
			if r.State == pipeline.StateRunning {
				n.interrupted = r.Name
			}
		}
	}
	if o.mode == "kind" {
		n.kubeconfig = p.kindKubeconfig()
		n.engine, n.engineErr = kindcluster.Detect(ctx)
	}
	dir, err := bundleDir(ctx, o.bundle, p)
	if err == nil {
		n.bundle, err = openBundle(dir)
	}
	n.bundleErr = err
	n.sitePath = chooseSite(ctx, o, p, n.bundle.dir, n.bundleErr == nil)
	if n.sitePath != "" {
		n.early, n.earlyErr = site.ReadEarly(n.sitePath)
	}
	// This machine's cluster ranges: the flag, else the site's, else the
	// default.
	var b site.Bootstrap
	if n.early != nil {
		b = n.early.Bootstrap
	}
	n.opts.podSubnet = cmp.Or(n.opts.podSubnet, b.PodCIDR, site.DefaultBootstrapPodCIDR)
	n.opts.svcSubnet = cmp.Or(n.opts.svcSubnet, b.ServiceCIDR, site.DefaultBootstrapServiceCIDR)
	return n
}

// chooseSite is the site firstboot runs with: the one `firstboot site
// apply` kept on the data disk, else --site, else the bundle's (the
// stick's); "" for none. The kept site wins: it is the last one applied,
// and a run with the stick's would add back the hosts it removed and
// configure Ironic for hosts no longer there. It logs which it uses.
func chooseSite(ctx context.Context, o runOptions, p paths, bundleDir string, bundleOK bool) string {
	log := logctx.From(ctx)
	given, from := o.site, "the --site file"
	if given == "" && bundleOK {
		if s := bundleSite(bundleDir); s != "" {
			given, from = s, "the bundle's site (the stick's)"
		}
	}
	kept, err := sitestore.Path(p.siteStore())
	if err != nil {
		log.Warn("the site that firstboot site apply kept cannot be read; not using it", "err", err)
	}
	switch {
	case kept != "" && given != "":
		log.Info("site: using the site firstboot site apply kept on the data disk, instead of "+from, "site", kept, "notUsed", given)
		return kept
	case kept != "":
		log.Info("site: using the site firstboot site apply kept on the data disk", "site", kept)
		return kept
	case given != "":
		log.Info("site: using "+from, "site", given)
	}
	return given
}

// bundleSite is the site file the bundle (the stick) carries; "" for
// none.
func bundleSite(bundleDir string) string {
	if s := filepath.Join(bundleDir, "site", "site.yaml"); fileExists(s) {
		return s
	}
	return ""
}

// openBundle opens the bundle's OCI layout (dir/registry, or dir itself
// when it is a bare layout as make toolchain leaves it) and lists its
// images and registries.
func openBundle(dir string) (bundleInfo, error) {
	b := bundleInfo{dir: dir, layout: filepath.Join(dir, "registry")}
	if fileExists(filepath.Join(dir, "index.json")) {
		b.layout = dir
	}
	srv, err := registry.Open(b.layout, registry.Options{})
	if err != nil {
		return b, fmt.Errorf("bundle: %w", err)
	}
	if bad := srv.Corrupted(); len(bad) > 0 {
		return b, fmt.Errorf("bundle %s: corrupted manifest %s (%s)", b.layout, bad[0].Digest, bad[0].Detail)
	}
	b.images, b.registries, b.has, b.digest = srv.Images(), srv.Registries(), srv.Has, srv.Digest
	if len(b.images) == 0 {
		return b, fmt.Errorf("bundle %s: its registry names no images (index.json annotation %s)", b.layout, registry.AnnotationImageName)
	}
	return b, nil
}

// lockedImages are the layout's images with their digests, as a lock
// names them (bundle.PinImages takes them).
func (b bundleInfo) lockedImages() map[string]bundle.LockedImage {
	out := map[string]bundle.LockedImage{}
	for _, ref := range b.images {
		if d, ok := b.digest(ref); ok {
			out[ref] = bundle.LockedImage{Ref: ref, Digest: cas.Digest(d)}
		}
	}
	return out
}

// osImages is the bundle's os-images folder: the deploy ramdisk and the
// OS images. A bare layout of make toolchain keeps them beside it, in
// files/.
func (b bundleInfo) osImages() string {
	if b.layout == b.dir {
		if d := filepath.Join(filepath.Dir(b.dir), "files"); fileExists(d) {
			return d
		}
	}
	return filepath.Join(b.dir, "os-images")
}

// packages is the bundle's packages folder. A bare layout has none: then
// an empty folder, so that the web server serves no packages.
func (b bundleInfo) packages() string {
	if d := filepath.Join(b.dir, "packages"); fileExists(d) {
		return d
	}
	return noPackages
}

// noPackages is the empty folder served for a bundle without packages.
const noPackages = "/run/bootstick/no-packages"

// findImage returns the bundle's image whose repository ends in /name.
func (b bundleInfo) findImage(name string) (registry.ImageRef, error) {
	for _, img := range b.images {
		r, err := registry.ParseRef(img)
		if err == nil && (r.Repository == name || strings.HasSuffix(r.Repository, "/"+name)) {
			return r, nil
		}
	}
	return registry.ImageRef{}, fmt.Errorf("the bundle has no %s image", name)
}

// site returns the site's early part; nil when there is no site.
func (n *node) site() (*site.Early, error) {
	if n.earlyErr != nil {
		return nil, n.earlyErr
	}
	return n.early, nil
}

// binDirs are where firstboot looks for programs: --bin-dir alone, or
// PATH, the system folders and the toolchain's bin.
func (n *node) binDirs() []string {
	if n.opts.binDir != "" {
		return []string{n.opts.binDir}
	}
	dirs := filepath.SplitList(os.Getenv("PATH"))
	dirs = append(dirs, "/usr/sbin", "/usr/bin")
	return append(dirs, filepath.Join(cas.DefaultRoot(), "toolchain", "current", "bin"))
}

// findBin finds a program in binDirs.
func (n *node) findBin(name string) (string, error) {
	dirs := n.binDirs()
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found in %s", name, strings.Join(dirs, ":"))
}

// toolEnv is the environment of the programs firstboot runs: kubeadm
// looks kubelet up on PATH, so PATH leads with the folders of the
// programs firstboot found.
func (n *node) toolEnv() []string {
	var lead []string
	for _, b := range []string{"kubelet", "kubeadm"} {
		if p, err := n.findBin(b); err == nil && !slices.Contains(lead, filepath.Dir(p)) {
			lead = append(lead, filepath.Dir(p))
		}
	}
	path := strings.Join(append(lead, os.Getenv("PATH")), string(filepath.ListSeparator))
	env := []string{"PATH=" + path}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	return env
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
