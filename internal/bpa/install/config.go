// Package install is what the binary provisioning agent does on a
// provisioned host, over SSH with the key firstboot generated and the
// host's pinned host key: install the packages the stick serves, point
// containerd at the stick's registry, and form the application cluster
// with kubeadm (init on the first master, join for the others). Every step
// is idempotent, so a BPA that stopped in the middle starts the same step
// again and carries on.
//
// The long steps run behind an Executor: SSHExecutor runs each as a job
// detached on the host (detached.go), which a lost connection neither
// cuts in half nor orphans, and Fake stands in for the hosts in the
// controller's tests. A step is done on the cluster's observed state
// (observe.go), never on a file's existence.
package install

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// ConfigMapName is the ConfigMap (in the Provisioning's namespace) that
// firstboot writes and the BPA reads, key ConfigKey.
const (
	ConfigMapName = "bootstick-install"
	ConfigKey     = "install.json"
)

// Config is what the BPA needs besides the Provisioning: where the stick
// serves the packages and the images, which plugins it carries, and each
// host's address and SSH host key. Nothing in it is secret.
type Config struct {
	// KubernetesVersion is the packages' release, e.g. v1.34.4.
	KubernetesVersion string `json:"kubernetesVersion"`
	// PackagesURL is where the stick serves its packages folder, ending
	// in "/".
	PackagesURL string `json:"packagesURL"`
	// Debs are installed with dpkg; Binaries go where Binary.Path says.
	Debs     []Deb    `json:"debs"`
	Binaries []Binary `json:"binaries"`
	// Registry is the stick's registry as hosts reach it
	// (http://ADDRESS:PORT); Mirrored are the registry names whose pulls
	// it serves, so images keep their names.
	Registry string   `json:"registry"`
	Mirrored []string `json:"mirrored"`
	// PauseImage is containerd's sandbox image.
	PauseImage string `json:"pauseImage"`
	// Images are every image the hosts run (the Kubernetes release's, the
	// sandbox's and the plugins'), each by its name and the lock's
	// digest. The install pulls each by that digest, which containerd
	// checks every byte against, and names it by its tag, as kubeadm and
	// the kubelet ask for it: nothing on a host pulls an image by tag.
	Images []Image `json:"images"`
	// Plugins are the KUD plugins the stick can serve, by name.
	Plugins map[string]Plugin `json:"plugins"`
	// ServiceSubnet is the cluster's service CIDR (the site's
	// cluster.serviceCIDR; the Provisioning has no field for it). Empty:
	// kubeadm's default.
	ServiceSubnet string `json:"serviceSubnet,omitempty"`
	// TimeServers are the hosts' NTP servers (the bootstrap machine on
	// the provisioning network, as the site's hosts have in their user
	// data): the BPA writes them into the user data it gives a host
	// applied with kubectl.
	TimeServers []string `json:"timeServers,omitempty"`
	// Hosts are the site's hosts, by name. A host of a Provisioning it
	// does not name (applied with kubectl) takes its host key and address
	// from its BareMetalHost's annotations (internal/bpa/README.md).
	Hosts map[string]Host `json:"hosts"`
}

// Deb is a Debian package in the packages folder.
type Deb struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	File    string `json:"file"`
	SHA256  string `json:"sha256"` // hex
}

// cniBinDir is where containerd looks for CNI plugins.
const cniBinDir = "/opt/cni/bin"

// cniPrefix marks a reference CNI plugin's binary: cni-bridge is the
// plugin bridge.
const cniPrefix = "cni-"

// flannelDelegates are the plugins flannel's CNI plugin hands a pod to
// (its conflist and its delegate): a host of a flannel cluster needs them.
var flannelDelegates = []string{"bridge", "host-local", "portmap", "loopback"}

// Binary is an executable in the packages folder, named Name.
type Binary struct {
	Name   string `json:"name"`
	SHA256 string `json:"sha256"` // hex
	// Zstd, when set, is the hex sha256 of the stick's zstd copy,
	// NAME.zst, which the host fetches and unpacks.
	Zstd string `json:"zstd,omitempty"`
}

// Path is where the host runs the binary from: a CNI plugin (flannel's, or
// a reference plugin, cni-NAME) from /opt/cni/bin, as NAME; the rest from
// /usr/bin.
func (b Binary) Path() string {
	switch {
	case b.Name == PluginFlannel:
		return cniBinDir + "/" + b.Name
	case strings.HasPrefix(b.Name, cniPrefix):
		return cniBinDir + "/" + strings.TrimPrefix(b.Name, cniPrefix)
	}
	return "/usr/bin/" + b.Name
}

// Image is an image by its name (registry/repository:tag) and digest.
type Image struct {
	Name   string `json:"name"`
	Digest string `json:"digest"`
}

// Pinned is the image by its digest alone: registry/repository@sha256:...
func (i Image) Pinned() string { return repository(i.Name) + "@" + i.Digest }

// repository is name without its tag.
func repository(name string) string {
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		return name[:i]
	}
	return name
}

// digestPattern is the only digest the stick's lock records.
var digestPattern = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// checkImages lists what is wrong with c's images: each needs a tagged
// name and a sha256 digest, and the sandbox's and every plugin's image
// must be among them.
func (c *Config) checkImages() []string {
	var probs []string
	names := map[string]bool{}
	for i, im := range c.Images {
		if repository(im.Name) == im.Name || strings.Contains(im.Name, "@") {
			probs = append(probs, fmt.Sprintf("images[%d].name %q is not registry/repository:tag", i, im.Name))
		}
		if !digestPattern.MatchString(im.Digest) {
			probs = append(probs, fmt.Sprintf("images[%d].digest %q is not sha256:<64 hex>", i, im.Digest))
		}
		names[im.Name] = true
	}
	if c.PauseImage != "" && !names[c.PauseImage] {
		probs = append(probs, "images lacks the pause image "+c.PauseImage)
	}
	for _, n := range slices.Sorted(maps.Keys(c.Plugins)) {
		if im := c.Plugins[n].Image; !names[im] {
			probs = append(probs, fmt.Sprintf("images lacks plugin %s's image %s", n, im))
		}
	}
	return probs
}

// image is the image of c named name.
func (c *Config) image(name string) (Image, bool) {
	i := slices.IndexFunc(c.Images, func(im Image) bool { return im.Name == name })
	if i < 0 {
		return Image{}, false
	}
	return c.Images[i], true
}

// Plugin is an add-on the stick carries.
type Plugin struct {
	// Image is the plugin's image, by its original name.
	Image string `json:"image"`
}

// Host is where the BPA reaches a host and the host key it must show.
type Host struct {
	Address string `json:"address"`
	// HostKey is the host's SSH public key in authorized_keys format.
	HostKey string `json:"hostKey"`
}

// PluginFlannel is the pod network.
const PluginFlannel = "flannel"

// PluginAfter are the plugins each plugin is installed after, when the
// cluster gets those too (a ContainerPackages' order). The pod network,
// which init installs, is before them all.
var PluginAfter = map[string][]string{}

// ParseConfig reads the ConfigMap's value and checks it.
func ParseConfig(data string) (*Config, error) {
	var c Config
	dec := json.NewDecoder(strings.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("ConfigMap %s key %s: %w", ConfigMapName, ConfigKey, err)
	}
	var probs []string
	for name, v := range map[string]string{"kubernetesVersion": c.KubernetesVersion, "packagesURL": c.PackagesURL,
		"registry": c.Registry, "pauseImage": c.PauseImage} {
		if v == "" {
			probs = append(probs, name+" is empty")
		}
	}
	if !strings.HasSuffix(c.PackagesURL, "/") {
		probs = append(probs, "packagesURL must end in /")
	}
	for _, n := range []string{"kubeadm", "kubelet", "kubectl"} {
		if !slices.ContainsFunc(c.Binaries, func(b Binary) bool { return b.Name == n }) {
			probs = append(probs, "binaries lacks "+n)
		}
	}
	if _, ok := c.Plugins[PluginFlannel]; ok && !slices.ContainsFunc(c.Debs, func(d Deb) bool { return d.Name == "containernetworking-plugins" }) {
		for _, n := range flannelDelegates {
			if !slices.ContainsFunc(c.Binaries, func(b Binary) bool { return b.Name == cniPrefix+n }) {
				probs = append(probs, "binaries lacks "+cniPrefix+n+" (flannel hands each pod to the "+n+" plugin)")
			}
		}
	}
	probs = append(probs, c.checkImages()...)
	slices.Sort(probs)
	if len(probs) > 0 {
		return nil, fmt.Errorf("ConfigMap %s key %s: %s (firstboot writes it from the stick's bundle.lock: run the site step again)",
			ConfigMapName, ConfigKey, strings.Join(probs, "; "))
	}
	return &c, nil
}

// Marshal is the ConfigMap's value.
func (c *Config) Marshal() (string, error) {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return "", err
	}
	return string(b) + "\n", nil
}

// UnknownPlugins are the names the stick cannot serve.
func (c *Config) UnknownPlugins(names []string) []string {
	var out []string
	for _, n := range names {
		if _, ok := c.Plugins[n]; !ok {
			out = append(out, n)
		}
	}
	return out
}

// PluginNames lists the plugins the stick serves, sorted.
func (c *Config) PluginNames() []string {
	out := make([]string, 0, len(c.Plugins))
	for n := range c.Plugins {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}
