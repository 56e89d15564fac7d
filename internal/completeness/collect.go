package completeness

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/bootstick/bootstick/internal/command"

	"github.com/bootstick/bootstick/internal/kubeadm"
	"github.com/bootstick/bootstick/internal/registry"
)

// Inputs are everything that will pull images on the appliance.
type Inputs struct {
	// Manifests are the payload's manifests, by file name.
	Manifests map[string][]byte
	// KubernetesVersion is the release kubeadm installs.
	KubernetesVersion string
	// Registry are the references the offline registry holds.
	Registry []string
	// KubeadmImages lists the images kubeadm pulls for a configuration
	// (kubeadm config images list --config); see Kubeadm.
	KubeadmImages func(ctx context.Context, config []byte) ([]string, error)
	// SiteObjects are the site's objects as render makes them (each an
	// unstructured object's content), when there is a site. The caller
	// renders them: completeness knows no site.
	SiteObjects []map[string]any
}

// Collect lists every image reference with its user: the manifests', the
// images kubeadm pulls for the configuration firstboot renders, and the
// site objects'.
func Collect(ctx context.Context, in Inputs) ([]Use, error) {
	var uses []Use
	names := make([]string, 0, len(in.Manifests))
	for n := range in.Manifests {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		u, err := ManifestImages("manifests/"+n, in.Manifests[n])
		if err != nil {
			return nil, err
		}
		uses = append(uses, u...)
	}

	cfg, err := KubeadmConfig(in.KubernetesVersion, in.Registry)
	if err != nil {
		return nil, err
	}
	if in.KubeadmImages != nil {
		imgs, err := in.KubeadmImages(ctx, cfg)
		if err != nil {
			return nil, err
		}
		for _, im := range imgs {
			uses = append(uses, Use{Image: im, By: "kubeadm init (kubeadm config images list for the rendered configuration)"})
		}
	}

	for _, obj := range in.SiteObjects {
		uses = append(uses, ObjectImages("site: "+describe(obj), obj)...)
	}
	return uses, nil
}

// KubeadmConfig renders the kubeadm configuration the way firstboot does
// on the appliance: the image repository and the etcd and CoreDNS tags are
// those of the registry's images. Addresses and paths are placeholders
// (they do not change which images kubeadm pulls).
func KubeadmConfig(version string, refs []string) ([]byte, error) {
	find := func(name string) (registry.ImageRef, bool) {
		for _, ref := range refs {
			r, err := registry.ParseRef(ref)
			if err == nil && (r.Repository == name || strings.HasSuffix(r.Repository, "/"+name)) {
				return r, true
			}
		}
		return registry.ImageRef{}, false
	}
	api, ok := find("kube-apiserver")
	if !ok {
		return nil, &MissingError{Missing: map[string][]string{"kube-apiserver:" + version: {"kubeadm init (the control plane)"}}}
	}
	c := kubeadm.Config{
		KubernetesVersion: version, NodeName: "bootstick", AdvertiseAddress: "192.0.2.1",
		PodSubnet: "10.244.0.0/16", ServiceSubnet: "10.96.0.0/12",
		CRISocket: "unix:///run/containerd/containerd.sock", ImageRepository: api.Registry,
		EtcdDataDir: "/var/lib/etcd", EncryptionConfigPath: "/etc/bootstick/encryption.yaml",
		CgroupDriver: "systemd",
	}
	if r, ok := find("etcd"); ok {
		c.EtcdImageTag = r.Tag
	}
	if r, ok := find("coredns"); ok {
		c.CoreDNSImageTag = r.Tag
	}
	return kubeadm.Render(c)
}

// Kubeadm lists images with the kubeadm binary at bin.
func Kubeadm(bin string) func(ctx context.Context, config []byte) ([]string, error) {
	return func(ctx context.Context, config []byte) ([]string, error) {
		dir, err := os.MkdirTemp("", "bootstick-kubeadm-*")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		f := filepath.Join(dir, "kubeadm.yaml")
		if err := os.WriteFile(f, config, 0o600); err != nil {
			return nil, err
		}
		out, err := command.Output(ctx, command.Options{}, bin, "config", "images", "list", "--config", f)
		if err != nil {
			return nil, err
		}
		return strings.Fields(string(out)), nil
	}
}
