package install

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"embed"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"path"
	"slices"
	"strings"
	"text/template"
	"time"

	"github.com/bootstick/bootstick/internal/containerd"
	"github.com/bootstick/bootstick/internal/kubeadm"
)

//go:embed scripts
var scripts embed.FS

var tmpl = template.Must(template.New("").Funcs(template.FuncMap{"shq": shellQuote}).ParseFS(scripts, "scripts/*"))

// shellQuote quotes s for bash.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func render(name string, data any) (string, error) {
	var b bytes.Buffer
	if err := tmpl.ExecuteTemplate(&b, name, data); err != nil {
		return "", fmt.Errorf("rendering %s: %w", name, err)
	}
	return b.String(), nil
}

// Cluster is the application cluster as the Provisioning gives it.
type Cluster struct {
	Name string
	// Endpoint is an API server's address: for init the first master's,
	// which kubeadm makes the controlPlaneEndpoint; for a join that of
	// the master it discovers the cluster through.
	Endpoint      string
	PodSubnet     string
	ServiceSubnet string
	Plugins       []string
	// Schedulable names the masters that also run workloads: kubeadm
	// leaves them without its control-plane taint.
	Schedulable map[string]bool
	// VIP is the control plane's virtual address ("" for none): the
	// masters' keepalived holds it, and init makes it the
	// controlPlaneEndpoint in place of the first master's address.
	VIP string
	// FirstMaster is the master that makes the cluster: it holds the VIP
	// until its API server answers, when the others' do not yet.
	FirstMaster string
}

// APIHost is where the cluster's API answers for every node: the VIP,
// else Endpoint.
func (cl Cluster) APIHost() string {
	if cl.VIP != "" {
		return cl.VIP
	}
	return cl.Endpoint
}

// DefaultPodSubnet is used when the Provisioning names none: the site's
// default application-cluster pod range, clear of the bootstrap machine's
// own (10.244.0.0/16, flannel's usual).
const DefaultPodSubnet = "10.128.0.0/16"

// Target is the host an install script is for.
type Target struct {
	Name, Address string
	Master        bool
	// EncryptionKey is the cluster's key for Secrets at rest (32 bytes):
	// a master keeps it at EncryptionConfigPath. A secret: the job that
	// carries it names it in its Secrets.
	EncryptionKey []byte
}

// InstallScript installs the packages on n and configures containerd,
// the kubelet, (with flannel) the CNI plugin and, on a master, the
// cluster's encryption at rest and (with a VIP) keepalived.
func InstallScript(c *Config, cl Cluster, n Target) (string, error) {
	cc := containerd.Config{
		Root: "/var/lib/containerd", State: "/run/containerd", Address: "/run/containerd/containerd.sock",
		HostsDir: "/etc/containerd/certs.d", SandboxImage: c.PauseImage, SystemdCgroup: true,
		CNIBinDir: "/opt/cni/bin", CNIConfDir: "/etc/cni/net.d",
	}
	ctoml, err := containerd.Render(cc)
	if err != nil {
		return "", err
	}
	hosts, err := containerd.HostsFiles(c.Mirrored, []string{c.Registry})
	if err != nil {
		return "", err
	}
	hostsTOML := map[string]string{}
	for rel, b := range hosts {
		hostsTOML[path.Clean(rel)] = string(b)
	}
	var cni string
	for _, p := range cl.Plugins {
		if p == PluginFlannel {
			b, _ := json.MarshalIndent(map[string]any{
				"name": "cbr0", "cniVersion": "0.3.1",
				"plugins": []any{
					map[string]any{"type": "flannel", "delegate": map[string]any{"hairpinMode": true, "isDefaultGateway": true}},
					map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
				},
			}, "", "  ")
			cni = string(b) + "\n"
		}
	}
	var vrrp, enc map[string]any
	if n.Master && cl.VIP != "" {
		conf, err := keepalivedConfig(cl, n.Name)
		if err != nil {
			return "", err
		}
		vrrp = map[string]any{"Config": conf, "Address": n.Address, "VIP": cl.VIP}
	}
	if n.Master {
		if len(n.EncryptionKey) != 32 {
			return "", fmt.Errorf("no encryption key for master %s's Secrets at rest", n.Name)
		}
		enc = map[string]any{"Path": EncryptionConfigPath, "Config": EncryptionConfig(n.EncryptionKey), "Cluster": cl.Name}
	}
	return render("install.sh", map[string]any{
		"Dir": packagesDir, "PackagesURL": c.PackagesURL, "Debs": c.Debs, "Binaries": c.Binaries,
		"ContainerdConfig": string(ctoml), "HostsTOML": hostsTOML, "CNIConfig": cni, "VRRP": vrrp, "Encryption": enc,
		"Images":     c.Images,
		"DHCPDaemon": slices.ContainsFunc(c.Binaries, func(b Binary) bool { return b.Name == cniPrefix+"dhcp" }),
	})
}

// packagesDir is where a host keeps the stick's packages it fetched.
const packagesDir = "/var/lib/bootstick/packages"

// EncryptionConfigPath is where a master keeps the cluster's
// EncryptionConfiguration (its folder 0700, the file 0600): the install
// writes it, and the API server reads it (kubeadm.EncryptionAPIServer).
const EncryptionConfigPath = "/etc/bootstick/encryption/config.yaml"

// registration names the node after the host, with the address the BPA
// reaches it at as the node's (a host may have several NICs). A host of
// the application cluster may have one CPU (a small edge box, a test VM).
// A master that runs workloads gets an empty taint list: no
// control-plane taint.
func (cl Cluster) registration(name, address string) kubeadm.NodeRegistration {
	r := kubeadm.NodeRegistration{Name: name, CRISocket: "unix:///run/containerd/containerd.sock", IgnorePreflightErrors: []string{"NumCPU"},
		KubeletExtraArgs: []kubeadm.Arg{{Name: "node-ip", Value: address}}}
	if cl.Schedulable[name] {
		r.Taints = &[]string{}
	}
	return r
}

// PatchesDir holds kubeadm's patches on a host (kubeadm.StallPatches).
const PatchesDir = "/etc/bootstick/kubeadm-patches"

// patches are the files of kubeadm's patches a script writes to Dir
// (the kubeadm-patches template); none for a worker.
type patches struct {
	Dir   string
	Files map[string]string
}

// controlPlanePatches are a master's: its configuration names them, and
// its script writes them.
func controlPlanePatches() (*kubeadm.Patches, patches) {
	return &kubeadm.Patches{Directory: PatchesDir}, patches{Dir: PatchesDir, Files: kubeadm.StallPatches()}
}

// InitScript creates the cluster on the first master, named host, at
// address. The cluster encrypts Secrets at rest with the
// EncryptionConfiguration the install wrote at EncryptionConfigPath.
func InitScript(c *Config, cl Cluster, host, address string) (string, error) {
	ic := kubeadm.InitConfiguration{TypeMeta: kubeadm.TypeMeta{APIVersion: kubeadm.API, Kind: "InitConfiguration"},
		NodeRegistration: cl.registration(host, address), LocalAPIEndpoint: kubeadm.APIEndpoint{AdvertiseAddress: address, BindPort: 6443},
		Timeouts: kubeadm.SlowMachineTimeouts}
	var files patches
	ic.Patches, files = controlPlanePatches()
	cc := kubeadm.NewClusterConfiguration(cl.Name, c.KubernetesVersion, cl.APIHost()+":6443", EncryptionConfigPath)
	cc.Networking.PodSubnet, cc.Networking.ServiceSubnet = cl.PodSubnet, cl.ServiceSubnet
	cc.APIServer.CertSANs = []string{cl.APIHost(), address}
	cfg, err := kubeadm.Marshal("", ic, cc, kubeadm.NewKubeletConfiguration("systemd"))
	if err != nil {
		return "", err
	}
	var first []string
	for _, p := range kubeadm.APIServerFirst {
		first = append(first, strings.Join(p, " "))
	}
	ready, err := time.ParseDuration(kubeadm.SlowMachineTimeouts.ControlPlaneComponentHealthCheck)
	if err != nil {
		return "", err
	}
	return render("init.sh", map[string]any{"KubeadmConfig": string(cfg), "Patches": files,
		"First": first, "Skip": kubeadm.InitSkipPhases, "Server": "https://" + net.JoinHostPort(address, "6443"), "ReadySeconds": int(ready.Seconds()),
		"Once": map[string]string{"Mark": "kubeadm-init.done", "Conf": "/etc/kubernetes/admin.conf", "Done": "exists",
			"Live": "kubectl --kubeconfig /etc/kubernetes/admin.conf --request-timeout=20s get --raw /readyz"}})
}

// Join is what a host needs to join: secrets, never logged.
type Join struct {
	Token          string
	CACertHash     string // sha256:HEX
	CertificateKey string // control-plane joins only
}

// JoinScript joins host (at address) to the cluster; a master joins the
// control plane.
func JoinScript(cl Cluster, host, address string, master bool, j Join) (string, error) {
	jc := kubeadm.JoinConfiguration{TypeMeta: kubeadm.TypeMeta{APIVersion: kubeadm.API, Kind: "JoinConfiguration"},
		NodeRegistration: cl.registration(host, address), Timeouts: kubeadm.SlowMachineTimeouts}
	var files patches
	if master {
		jc.Patches, files = controlPlanePatches()
	}
	jc.Discovery.BootstrapToken.APIServerEndpoint = cl.Endpoint + ":6443"
	jc.Discovery.BootstrapToken.Token = j.Token
	jc.Discovery.BootstrapToken.CACertHashes = []string{j.CACertHash}
	if master {
		jc.ControlPlane = &kubeadm.JoinControlPlane{LocalAPIEndpoint: kubeadm.APIEndpoint{AdvertiseAddress: address, BindPort: 6443}, CertificateKey: j.CertificateKey}
	}
	cfg, err := kubeadm.Marshal("", jc)
	if err != nil {
		return "", err
	}
	return render("join.sh", map[string]any{"JoinConfig": string(cfg), "Patches": files,
		"Once": map[string]string{"Mark": "kubeadm-join.done", "Conf": "/etc/kubernetes/kubelet.conf", "Done": "joined",
			"Live": "kubectl --kubeconfig /etc/kubernetes/kubelet.conf --request-timeout=20s get node " + shellQuote(host)}})
}

// PluginManifest is the plugin's objects for kubectl apply.
func PluginManifest(c *Config, cl Cluster, name string) (string, error) {
	p, ok := c.Plugins[name]
	if !ok {
		return "", fmt.Errorf("KUD plugin %q is not on this stick", name)
	}
	// The manifest names the image by the lock's digest, as the install
	// pulled it.
	im, ok := c.image(p.Image)
	if !ok {
		return "", fmt.Errorf("KUD plugin %q: the stick's images lack its image %s", name, p.Image)
	}
	switch name {
	case PluginFlannel:
		return render("flannel.yaml", map[string]any{"PodSubnet": cl.PodSubnet, "Image": im.Pinned(), "Endpoint": cl.APIHost()})
	}
	return "", fmt.Errorf("KUD plugin %q has no manifest in this BPA", name)
}

// CACertHash is kubeadm's discovery hash of a CA certificate (PEM): the
// SHA-256 of its public key info.
func CACertHash(caPEM []byte) (string, error) {
	b, _ := pem.Decode(caPEM)
	if b == nil {
		return "", errors.New("the cluster's CA certificate is not PEM")
	}
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return "", fmt.Errorf("parsing the cluster's CA certificate: %w", err)
	}
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}
