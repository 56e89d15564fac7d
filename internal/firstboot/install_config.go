package firstboot

import (
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"slices"

	"github.com/bootstick/bootstick/internal/bpa/install"
	"github.com/bootstick/bootstick/internal/bundle"
	"github.com/bootstick/bootstick/internal/registry"
	"github.com/bootstick/bootstick/internal/render"
)

// packagesLink is the fixed path the ironic Pod's web server mounts the
// bundle's packages folder from (32-ironic.yaml), served as /packages/.
const packagesLink = "/run/bootstick/packages"

// installConfig is what the BPA installs on the hosts, from the bundle's
// lock: the packages as the web server on the provisioning address serves
// them, the registry there, and the plugins whose images the bundle
// carries. Nil when the bundle has no lock (a bare toolchain layout): it
// then has no packages to install.
func installConfig(n *node, provisioning string) (*install.Config, error) {
	lock, err := bundle.ReadLock(filepath.Join(n.bundle.dir, "bundle.lock"))
	if err != nil || lock == nil {
		return nil, err
	}
	pr, err := netip.ParsePrefix(provisioning)
	if err != nil {
		return nil, fmt.Errorf("bootstrap.provisioning.address: %w", err)
	}
	_, port, err := net.SplitHostPort(n.opts.registryAddr)
	if err != nil {
		return nil, fmt.Errorf("the registry's address %q: %w", n.opts.registryAddr, err)
	}
	host := pr.Addr().String()
	c := &install.Config{
		KubernetesVersion: lock.Kubernetes.Version,
		PackagesURL:       fmt.Sprintf("http://%s/packages/", net.JoinHostPort(host, fmt.Sprint(render.ImagePort))),
		Registry:          "http://" + net.JoinHostPort(host, port),
		Mirrored:          slices.Clone(n.bundle.registries),
		Plugins:           map[string]install.Plugin{},
	}
	for _, d := range lock.Packages.Debs {
		c.Debs = append(c.Debs, install.Deb{Name: d.Name, Version: d.Version, File: d.File, SHA256: d.SHA256.Hex()})
	}
	for _, b := range lock.Packages.Binaries {
		bin := install.Binary{Name: b.Name, SHA256: b.SHA256.Hex()}
		if b.Zstd != nil {
			bin.Zstd = b.Zstd.SHA256.Hex()
		}
		c.Binaries = append(c.Binaries, bin)
	}
	pause, err := n.bundle.findImage("pause")
	if err != nil {
		return nil, err
	}
	c.PauseImage = pause.String()
	for name, image := range lock.Plugins() {
		c.Plugins[name] = install.Plugin{Image: image}
	}
	// kubeadm names its images from kube-apiserver's registry, as
	// kubeadmConfig does for this machine's own cluster.
	api, err := n.bundle.findImage("kube-apiserver")
	if err != nil {
		return nil, err
	}
	if c.Images, err = hostImages(lock, api.Registry, c); err != nil {
		return nil, err
	}
	return c, nil
}

// hostImages are the images the application cluster's hosts run, with the
// lock's digests: the Kubernetes release's (every image of kubeRegistry,
// which kubeadm names its images from), the sandbox's and the plugins'.
func hostImages(lock *bundle.Lock, kubeRegistry string, c *install.Config) ([]install.Image, error) {
	wanted := map[string]bool{c.PauseImage: true}
	for _, p := range c.Plugins {
		wanted[p.Image] = true
	}
	var out []install.Image
	for _, im := range lock.Images {
		r, err := registry.ParseRef(im.Ref)
		if err != nil || (r.Registry != kubeRegistry && !wanted[r.String()]) {
			continue
		}
		if im.Digest == "" {
			return nil, fmt.Errorf("bundle.lock: image %s has no digest, and the hosts pull every image by its digest (build the stick from a complete lock)", im.Ref)
		}
		out = append(out, install.Image{Name: r.String(), Digest: string(im.Digest)})
	}
	return out, nil
}
