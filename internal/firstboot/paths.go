package firstboot

import (
	"path/filepath"

	"github.com/bootstick/bootstick/internal/containerd"
)

// Service names of the long-lived processes firstboot starts.
const (
	registryService = "bootstick-registry"
	kubeletService  = "bootstick-kubelet"
)

// cniBridge is the bridge our CNI config creates; reset deletes it.
const cniBridge = "bootstick0"

// adminConf is kubeadm's fixed admin kubeconfig.
const adminConf = "/etc/kubernetes/admin.conf"

// liveBundle is the bundle on the booted stick: live-boot mounts the boot
// medium at /run/live/medium.
const liveBundle = "/run/live/medium/bundle"

// etcSSH is where sshd reads its host keys.
const etcSSH = "/etc/ssh"

// paths are every place firstboot writes. Host mode keeps all of them
// apart from anything else on the machine (its own containerd socket, root
// and state), so reset can remove exactly these.
type paths struct {
	Data  string // persistent: the data disk's mount point, or a folder in host mode
	Run   string // runtime state, under /run
	Etc   string // rendered configuration
	State string // firstboot's state file and lock
}

// defaultData is --data's default: the data disk's mount point.
const defaultData = "/var/lib/bootstick"

func defaultPaths(data string) paths {
	return paths{Data: data, Run: "/run/bootstick", Etc: "/etc/bootstick", State: filepath.Join(data, "firstboot")}
}

func (p paths) services() string         { return filepath.Join(p.Run, "services") }
func (p paths) lock() string             { return filepath.Join(p.Run, "firstboot.lock") }
func (p paths) commandLogs() string      { return filepath.Join(p.Data, "logs") }
func (p paths) containerdConfig() string { return filepath.Join(p.Etc, "containerd", "config.toml") }
func (p paths) kubeadmConfig() string    { return filepath.Join(p.Etc, "kubeadm.yaml") }
func (p paths) kubeadmPatches() string   { return filepath.Join(p.Etc, "kubeadm-patches") }
func (p paths) cniConfDir() string       { return filepath.Join(p.Etc, "cni", "net.d") }
func (p paths) encryptionConfig() string { return filepath.Join(p.Data, "encryption", "config.yaml") }
func (p paths) etcdData() string         { return filepath.Join(p.Data, "etcd") }
func (p paths) registryLog() string      { return filepath.Join(p.Data, "registry", "access.log") }
func (p paths) corruptFile() string      { return filepath.Join(p.Data, "registry", "corrupt.json") }
func (p paths) sshKeyDir() string        { return filepath.Join(p.Data, "ssh") }
func (p paths) ageIdentity() string      { return filepath.Join(p.Data, "age", "identity.txt") }
func (p paths) hostsFile() string        { return filepath.Join(p.State, "hosts.json") }
func (p paths) sshHostKeys() string      { return filepath.Join(p.Data, "ssh-host-keys") }

// siteStore keeps the site `firstboot site apply` applied (sitestore),
// which later runs use instead of the stick's.
func (p paths) siteStore() string { return filepath.Join(p.Data, "site") }

// kindKubeconfig is the kind cluster's kubeconfig (0600), on the data
// folder: kind mode never touches the user's ~/.kube/config.
func (p paths) kindKubeconfig() string { return filepath.Join(p.Data, "kind", "kubeconfig") }

// isoMount is where `--bundle X.iso` is loop-mounted, read-only. It stays
// mounted while the node runs (the registry serves from it); reset
// unmounts it.
func (p paths) isoMount() string { return filepath.Join(p.Run, "iso") }

func (p paths) containerd() containerd.Config {
	c := containerd.HostPaths(p.Data, p.Run, p.Etc)
	c.CNIConfDir = p.cniConfDir()
	return c
}

// binds are the folders kept on the data disk besides those firstboot
// places there itself (etcd, containerd): target -> folder on the disk.
var binds = map[string]string{
	"/var/lib/kubelet": "kubelet",
	"/etc/kubernetes":  "kubernetes",
	"/etc/bootstick":   "etc",
}
