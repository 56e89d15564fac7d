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
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/bootstick/bootstick/internal/logctx"
	"github.com/bootstick/bootstick/internal/render"

	"github.com/bootstick/bootstick/internal/preflight"

	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/bootstick/bootstick/internal/bundle"
	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/completeness"
	"github.com/bootstick/bootstick/internal/debs"
	"github.com/bootstick/bootstick/internal/fetch"
	"github.com/bootstick/bootstick/internal/iso"
	"github.com/bootstick/bootstick/internal/kubeyaml"
	"github.com/bootstick/bootstick/internal/osimage"
	"github.com/bootstick/bootstick/internal/payload"
	"github.com/bootstick/bootstick/internal/progress"
	"github.com/bootstick/bootstick/internal/recipes"
	"github.com/bootstick/bootstick/internal/rootfs"
	"github.com/bootstick/bootstick/internal/site"
	"github.com/bootstick/bootstick/internal/sshkeys"
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

// fetchAll puts every file and image of the lock into the cache.
func fetchAll(ctx context.Context, o Options, b *bundle.Bundle, l *bundle.Lock) error {
	var items []fetch.Item
	var locals []bundle.LockedFile
	for _, f := range append(append([]bundle.LockedFile(nil), l.Files...), l.Kubernetes.Binaries...) {
		switch f.Source {
		case bundle.SourceURL:
			items = append(items, fetch.Item{URL: f.URL, SHA256: f.SHA256, Size: f.Size})
		case bundle.SourceLocal:
			locals = append(locals, f)
		}
	}
	fr := &fetch.Fetcher{Store: o.Store, Progress: o.Progress, Client: o.HTTPClient}
	if _, err := fr.Fetch(ctx, items); err != nil {
		return err
	}
	for _, f := range locals {
		if err := storeFile(ctx, o, b, f); err != nil {
			return err
		}
	}
	var pkgs []debs.Package
	for _, d := range l.Packages.Debs {
		pkgs = append(pkgs, d.Package)
	}
	if len(pkgs) > 0 {
		work, err := o.Store.TempDir("debs-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(work)
		if err := o.FetchDebs(ctx, o.Store, pkgs, work); err != nil {
			return err
		}
	}
	for _, im := range l.Images {
		if im.Source != bundle.SourceRegistry {
			if !fetch.Complete(o.Store, im.Digest) {
				return fmt.Errorf("image %s (%s) is not in the cache: run mkusb toolchain", im.Ref, im.Digest)
			}
			continue
		}
		if _, err := fetch.PullImage(ctx, o.Store, im.Ref, im.Digest, o.RemoteOptions...); err != nil {
			return err
		}
	}
	return nil
}

// storeFile puts a pinned file the cache lacks into it: a release binary
// by its URL, or a file beside the bundle (the toolchain's are there).
func storeFile(ctx context.Context, o Options, b *bundle.Bundle, f bundle.LockedFile) error {
	if o.Store.Has(f.SHA256) {
		return nil
	}
	switch f.Source {
	case bundle.SourceURL:
		fr := &fetch.Fetcher{Store: o.Store, Progress: o.Progress, Client: o.HTTPClient}
		_, err := fr.Fetch(ctx, []fetch.Item{{URL: f.URL, SHA256: f.SHA256, Size: f.Size}})
		return err
	case bundle.SourceLocal:
		d, _, err := o.Store.PutFile(b.Path(f.Path))
		if err == nil && d != f.SHA256 {
			err = fmt.Errorf("%s changed since it was locked (sha256 %s, locked %s): build again without --locked to relock", f.Path, d.Hex(), f.SHA256.Hex())
		}
		return err
	}
	return fmt.Errorf("%s (%s) is not in the cache: run mkusb toolchain", f.Name, f.SHA256)
}

func loadSite(ctx context.Context, path, identity string, allowCleartext bool, images []osimage.Image, plugins []string) (*site.Site, []string, error) {
	// The stick makes the site's cluster anew.
	opts := site.Options{BundledImages: images, Plugins: plugins, NewCluster: true}
	if identity != "" {
		ids, err := site.LoadIdentities(identity)
		if err != nil {
			return nil, nil, err
		}
		opts.Identities = ids
	}
	s, err := site.Load(path, opts)
	if err != nil {
		return nil, nil, err
	}
	var files []string
	if s.Bootstrap.BMCCAFile != "" {
		files = append(files, s.Bootstrap.BMCCAFile)
	}
	var clear []string
	for i, h := range s.Hosts {
		c := h.BMC.Credentials
		if c.File != "" {
			files = append(files, c.File)
		}
		if c.EncryptedPassword == "" {
			where := fmt.Sprintf("hosts[%d].bmc.credentials.password (host %s)", i, h.Name)
			if c.File != "" {
				where = fmt.Sprintf("%s: password (hosts[%d].bmc.credentials.file, host %s)", c.File, i, h.Name)
			}
			clear = append(clear, where)
			if allowCleartext {
				logctx.From(ctx).Warn("the stick will carry a BMC password in clear text (only root can read it there, but anyone holding the stick can): encrypt it with age (encryptedPassword)",
					"host", h.Name, "field", where)
			}
		}
	}
	if len(clear) > 0 && !allowCleartext {
		return nil, nil, fmt.Errorf("site %s: BMC passwords in clear text, which anyone holding the stick could read: %s. "+
			"Encrypt each with age (encryptedPassword: the output of age -a -r RECIPIENT, and --age-identity to build), "+
			"or build with --allow-cleartext to carry them as they are", path, strings.Join(clear, "; "))
	}
	sort.Strings(files)
	return s, files, nil
}

func checkComplete(ctx context.Context, o Options, b *bundle.Bundle, l *bundle.Lock, st *site.Site, siteImages []osimage.Image) error {
	in := completeness.Inputs{Manifests: map[string][]byte{}, KubernetesVersion: l.Kubernetes.Version}
	if st != nil {
		objs, err := siteObjects(st, siteImages)
		if err != nil {
			return err
		}
		in.SiteObjects = objs
	}
	for _, m := range l.Manifests {
		data, err := l.PinnedManifest(b, m)
		if err != nil {
			return err
		}
		in.Manifests[m.Name] = data
	}
	have := map[string]string{}
	for ref, im := range l.ImageRefs() {
		have[ref] = string(im.Digest)
		in.Registry = append(in.Registry, ref)
	}
	sort.Strings(in.Registry)
	in.KubeadmImages = o.KubeadmImages
	if in.KubeadmImages == nil {
		bin, cleanup, err := kubeadmBinary(o.Store, l)
		if err != nil {
			return err
		}
		defer cleanup()
		in.KubeadmImages = completeness.Kubeadm(bin)
	}
	uses, err := completeness.Collect(ctx, in)
	if err != nil {
		return err
	}
	if err := completeness.Check(uses, have); err != nil {
		return err
	}
	return checkDeployRamdisk(in.Manifests, l)
}

// siteObjects renders the site the way firstboot will, with a throwaway
// SSH key (keys name no image), for the completeness check.
func siteObjects(st *site.Site, images []osimage.Image) ([]map[string]any, error) {
	key, err := sshkeys.Generate(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("rendering the site: %w", err)
	}
	objs, err := render.Render(st, render.Options{SSHKey: key, Images: images})
	if err != nil {
		return nil, fmt.Errorf("rendering the site: %w", err)
	}
	us, err := render.Unstructured(objs)
	if err != nil {
		return nil, fmt.Errorf("rendering the site: %w", err)
	}
	out := make([]map[string]any, len(us))
	for i, u := range us {
		out[i] = u.Object
	}
	return out, nil
}

// checkDeployRamdisk fails when the stick ships the baremetal-operator but
// not the deploy kernel and initramfs it hands Ironic (firstboot points
// DEPLOY_KERNEL_URL and DEPLOY_RAMDISK_URL at /bundle/os-images).
func checkDeployRamdisk(manifests map[string][]byte, l *bundle.Lock) error {
	bmo := ""
	for name, data := range manifests {
		objs, err := kubeyaml.Decode(bytes.NewReader(data))
		if err != nil {
			return fmt.Errorf("manifests/%s: %w", name, err)
		}
		for _, o := range objs {
			if o.GetKind() == "Deployment" && o.GetName() == "baremetal-operator" {
				bmo = name
			}
		}
	}
	if bmo == "" {
		return nil
	}
	have := l.PayloadFiles()
	var missing []string
	for _, f := range []string{render.DeployRamdisk + ".kernel", render.DeployRamdisk + ".initramfs"} {
		if _, ok := have["os-images/"+f]; !ok {
			missing = append(missing, "os-images/"+f)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("manifests/%s runs the baremetal-operator, but the stick lacks the deploy ramdisk it boots hosts with: /bundle/%s\nadd the ironic-python-agent artifact to the recipes, or files with those names to the bundle",
			bmo, strings.Join(missing, ", /bundle/"))
	}
	return nil
}

// kubeadmBinary is an executable copy of the release's kubeadm.
func kubeadmBinary(store *cas.Store, l *bundle.Lock) (string, func(), error) {
	for _, f := range l.Kubernetes.Binaries {
		if f.Name != "kubeadm" {
			continue
		}
		dir, err := store.TempDir("kubeadm-")
		if err != nil {
			return "", nil, err
		}
		p := filepath.Join(dir, "kubeadm")
		if err := store.Link(f.SHA256, p); err != nil {
			os.RemoveAll(dir)
			return "", nil, err
		}
		if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 == 0 {
			// A downloaded blob is read-only and not executable: copy it.
			os.Remove(p)
			data, err := os.ReadFile(store.BlobPath(f.SHA256))
			if err == nil {
				err = os.WriteFile(p, data, 0o755)
			}
			if err != nil {
				os.RemoveAll(dir)
				return "", nil, err
			}
		}
		return p, func() { os.RemoveAll(dir) }, nil
	}
	return "", nil, errors.New("the Kubernetes release has no kubeadm binary: the completeness check needs it")
}

// layerRecord is the action record of the appliance layer.
type layerRecord struct {
	Layer cas.Digest `json:"layer"`
}

func (r *layerRecord) Blobs() []cas.Digest { return []cas.Digest{r.Layer} }

// layerBinaries are the release's binaries the appliance itself runs.
var layerBinaries = []string{"kubeadm", "kubelet", "kubectl"}

// buildLayer makes the appliance's squashfs (the overlay folder, firstboot
// and the Kubernetes binaries), cached by the hash of its inputs.
func buildLayer(ctx context.Context, o Options, l *bundle.Lock) (cas.Digest, error) {
	files := map[string]string{}
	inputs := map[string]any{"action": "layer/v1", "epoch": o.Epoch.Unix(), "level": l.OS.CompressionLevel}
	if o.Firstboot != "" {
		d, _, err := cas.HashFile(o.Firstboot)
		if err != nil {
			return "", fmt.Errorf("the firstboot binary: %w (build it: make bin/firstboot)", err)
		}
		inputs["firstboot"] = d
		files["/usr/local/bin/firstboot"] = o.Firstboot
	}
	for _, name := range layerBinaries {
		for _, f := range l.Kubernetes.Binaries {
			if f.Name == name {
				inputs["bin:"+name] = f.SHA256
				files["/usr/local/bin/"+name] = o.Store.BlobPath(f.SHA256)
			}
		}
	}
	if o.Overlay != "" {
		h, err := cas.HashTree(o.Overlay)
		if err != nil {
			return "", err
		}
		inputs["overlay"] = h
	}
	key, err := cas.Key(inputs)
	if err != nil {
		return "", err
	}
	rec := &layerRecord{}
	if ok, err := o.Store.GetAction(key, rec); err != nil {
		return "", err
	} else if ok {
		return rec.Layer, nil
	}
	work, err := o.Store.TempDir("layer-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	root := filepath.Join(work, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		return "", err
	}
	if err := rootfs.StageLayer(root, o.Overlay, files); err != nil {
		return "", err
	}
	// Blobs are read-only in the cache; the binaries must be executable.
	for p := range files {
		if err := os.Chmod(filepath.Join(root, p), 0o755); err != nil {
			return "", err
		}
	}
	out := filepath.Join(work, rootfs.LayerImage)
	if err := rootfs.Squash(ctx, root, out, rootfs.SquashOptions{Level: l.OS.CompressionLevel, Epoch: o.Epoch, AllRoot: true}); err != nil {
		return "", err
	}
	d, _, err := o.Store.PutFile(out)
	if err != nil {
		return "", err
	}
	rec.Layer = d
	return d, o.Store.PutAction(key, rec)
}

// stageTree lays out the ISO's tree: /live and /bundle.
func stageTree(ctx context.Context, o Options, b *bundle.Bundle, l *bundle.Lock, osr OSResult, layer cas.Digest, tree string, siteFiles []string, st *payload.Stats) error {
	live := filepath.Join(tree, "live")
	if err := os.MkdirAll(live, 0o755); err != nil {
		return err
	}
	info := BuildInfo{SourceDateEpoch: o.Epoch.Unix(), Live: map[string]cas.Digest{}}
	for _, f := range []struct{ src, name string }{
		{osr.Kernel, rootfs.KernelFile}, {osr.Initrd, rootfs.InitrdFile}, {osr.Squashfs, rootfs.BaseImage},
	} {
		dst := filepath.Join(live, f.name)
		if err := linkOrCopy(f.src, dst); err != nil {
			return fmt.Errorf("staging live/%s: %w", f.name, err)
		}
		d, _, err := cas.HashFile(dst)
		if err != nil {
			return err
		}
		info.Live["live/"+f.name] = d
	}
	if err := o.Store.Verify(layer); err != nil {
		return err
	}
	if err := o.Store.Link(layer, filepath.Join(live, rootfs.LayerImage)); err != nil {
		return err
	}
	info.Live["live/"+rootfs.LayerImage] = layer
	stats, err := payload.Stage(ctx, payload.Options{Store: o.Store, Lock: l, Bundle: b, Site: o.Site, SiteFiles: siteFiles,
		Dir: filepath.Join(tree, "bundle")})
	if err != nil {
		return err
	}
	*st = stats
	if o.Site != "" {
		d, _, err := cas.HashFile(o.Site)
		if err != nil {
			return err
		}
		info.Site = d
	}
	data, _ := json.MarshalIndent(info, "", "  ")
	return os.WriteFile(filepath.Join(tree, "bundle", "build.json"), append(data, '\n'), 0o644)
}

func linkOrCopy(src, dst string) error {
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
