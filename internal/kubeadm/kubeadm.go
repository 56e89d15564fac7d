// Package kubeadm renders the configuration kubeadm init reads for a single
// node: InitConfiguration and ClusterConfiguration (kubeadm.k8s.io/v1beta4),
// a KubeletConfiguration, and the EncryptionConfiguration that encrypts
// Secrets at rest with a key kept on the data disk.
package kubeadm

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/bootstick/bootstick/internal/atomicfile"
)

// Config is one node's cluster.
type Config struct {
	ClusterName       string
	KubernetesVersion string // from the lock, e.g. v1.34.4
	NodeName          string
	AdvertiseAddress  string // the node's address
	BindPort          int    // default 6443
	PodSubnet         string
	ServiceSubnet     string
	DNSDomain         string // default cluster.local
	// CRISocket is containerd's socket, e.g. unix:///run/bootstick/containerd/containerd.sock.
	CRISocket string
	// ImageRepository is where kubeadm's images are named from (their
	// original registry; the mirror resolves it), e.g. registry.k8s.io.
	ImageRepository string
	EtcdImageTag    string // optional: the etcd tag in the bundle
	CoreDNSImageTag string // optional
	EtcdDataDir     string // on the data disk
	// EncryptionConfigPath is the EncryptionConfiguration on the data disk;
	// its folder is mounted read-only into the API server.
	EncryptionConfigPath string
	// CgroupDriver is "systemd" when systemd is PID 1, else "cgroupfs".
	CgroupDriver string
	// CertSANs are extra names for the API server's certificate.
	CertSANs []string
	// PatchesDir, when set, is the folder of kubeadm's patches for the
	// static Pods (WriteStallPatches writes them there).
	PatchesDir string
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var probs []string
	need := func(name, v string) {
		if v == "" {
			probs = append(probs, name+" is not set")
		}
	}
	need("KubernetesVersion", c.KubernetesVersion)
	need("NodeName", c.NodeName)
	need("CRISocket", c.CRISocket)
	need("ImageRepository", c.ImageRepository)
	need("EtcdDataDir", c.EtcdDataDir)
	need("EncryptionConfigPath", c.EncryptionConfigPath)
	if c.KubernetesVersion != "" && !strings.HasPrefix(c.KubernetesVersion, "v") {
		probs = append(probs, fmt.Sprintf("KubernetesVersion %q must start with v", c.KubernetesVersion))
	}
	if _, err := netip.ParseAddr(c.AdvertiseAddress); err != nil {
		probs = append(probs, fmt.Sprintf("AdvertiseAddress %q is not an IP address", c.AdvertiseAddress))
	}
	for name, v := range map[string]string{"PodSubnet": c.PodSubnet, "ServiceSubnet": c.ServiceSubnet} {
		if _, err := netip.ParsePrefix(v); err != nil {
			probs = append(probs, fmt.Sprintf("%s %q is not a CIDR", name, v))
		}
	}
	if c.CgroupDriver != "systemd" && c.CgroupDriver != "cgroupfs" {
		probs = append(probs, fmt.Sprintf("CgroupDriver %q is not systemd or cgroupfs", c.CgroupDriver))
	}
	if !strings.HasPrefix(c.CRISocket, "unix://") && c.CRISocket != "" {
		probs = append(probs, fmt.Sprintf("CRISocket %q must be a unix:// URL", c.CRISocket))
	}
	for name, p := range map[string]string{"EtcdDataDir": c.EtcdDataDir, "EncryptionConfigPath": c.EncryptionConfigPath} {
		if p != "" && !filepath.IsAbs(p) {
			probs = append(probs, fmt.Sprintf("%s %q is not an absolute path", name, p))
		}
	}
	if len(probs) > 0 {
		return fmt.Errorf("kubeadm config: %s", strings.Join(probs, "; "))
	}
	return nil
}

// SlowMachineTimeouts are kubeadm's waits on both clusters. kubeadm's
// defaults (4 minutes for the control plane to become healthy, 1 minute
// of retries for an API call) are made for ordinary servers; a cluster may
// start on a slow or emulated machine, where the first start of etcd and
// the API server took over 4 minutes under QEMU's TCG, and the
// application cluster's upload-config phase gave up after 2 minutes of
// 10-second requests that its loaded API server did not answer
// (TestAppClusterDHCPClock, session 34). The last two serve a join.
var SlowMachineTimeouts = Timeouts{
	ControlPlaneComponentHealthCheck: "20m0s",
	KubeletHealthCheck:               "20m0s",
	KubernetesAPICall:                "5m0s",
	EtcdAPICall:                      "5m0s",
	TLSBootstrap:                     "20m0s",
	Discovery:                        "10m0s",
}

// KeyAlgorithm is the cluster's keys' and certificates' algorithm. Every
// TLS handshake signs with the server's key: with kubeadm's default,
// RSA-2048, the signatures alone were a tenth of the TCG appliance's API
// server's CPU in Journey B (its kubelet probes it over a new connection
// every second), and a P-256 signature costs a small part of an RSA one.
const KeyAlgorithm = "ECDSA-P256"

// etcd's raft timing for slow machines: a small edge server's disk, or a
// virtual machine without KVM, fsyncs slowly, and with etcd's defaults
// (a 100 ms heartbeat, a 1 s election timeout) a request that waits on
// the disk times out after 7 s ("etcdserver: request timed out"); the API
// server then fails its post-start hooks and kubelet restarts it. etcd's
// request timeout is 5 s plus twice the election timeout: 15 s with these.
// One member elects itself at once on start (etcd fast-forwards its
// first election's ticks), so a healthy start is no slower. Both clusters
// use them: this one and the application cluster (internal/bpa/install).
const (
	EtcdHeartbeatIntervalMS = "500"
	EtcdElectionTimeoutMS   = "5000"
)

// EtcdArgs are the flags that give etcd the timing above.
func EtcdArgs() []Arg {
	return []Arg{{"heartbeat-interval", EtcdHeartbeatIntervalMS}, {"election-timeout", EtcdElectionTimeoutMS}}
}

// APIServerEtcdCheckTimeout is how long the API server's /livez and
// /readyz wait for etcd's answer (kube-apiserver's 2 s by default). On a
// loaded node etcd answers, but slower: the application cluster's API
// server on a TCG node-0 failed /livez's etcd check for minutes after
// kubeadm init had passed (TestAppClusterDHCPClock, session 36), and a
// failing /livez is what the kubelet restarts the API server on. 10 s
// stays inside kubeadm's probe timeout (15 s); a hung etcd still fails.
const APIServerEtcdCheckTimeout = 10 * time.Second

// APIServerArgs are the API server's flags on both clusters, beside its
// encryption at rest (EncryptionAPIServer).
func APIServerArgs() []Arg {
	t := APIServerEtcdCheckTimeout.String()
	return []Arg{{"etcd-healthcheck-timeout", t}, {"etcd-readycheck-timeout", t}}
}

// Leader election for a control plane whose API server stalls: a
// controller that cannot renew its Lease within the renew deadline exits
// (controller-runtime's and kube-controller-manager's defaults: a 15 s
// lease, renewed within 10 s, retried every 2 s). On one node there is no
// other replica to hand over to, so an exit only adds a restart to the
// stall: in Journey B's run 6 the TCG appliance's controller manager, BMO
// and BPA all went into CrashLoopBackOff while its API server was slow.
// These are OpenShift's default leader-election timings, which ride out
// about 78 s of an API server's absence. Both clusters use them: the
// appliance's controller manager and scheduler (Render), BMO and the BPA
// (manifests/), and the application cluster's control plane
// (internal/bpa/install). There a cluster may have three masters, and the
// cost is accepted: a master that dies holding a Lease hands it over
// after up to 163 s (lease and retry), not about 17 s.
const (
	LeaderElectionLeaseDuration = 137 * time.Second
	LeaderElectionRenewDeadline = 107 * time.Second
	LeaderElectionRetryPeriod   = 26 * time.Second
)

// StallFailureThreshold is how many failed liveness probes (10 s apart)
// the kubelet takes before it restarts etcd or the API server: 5 minutes,
// where kubeadm's 8 make 80 s. On a host whose CPU is short (a small edge
// box, a test VM without KVM) etcd can stall for over a minute; the API
// server's /livez then fails, and the kubelet restarted it in
// TestAppClusterDHCPClock's CI run. A new API server on a stalled node
// fails its own post-start hooks (it cannot reach itself in time) and
// restarts again: the stall became a crash loop of 10 minutes and more.
// Waiting out the stall costs a truly hung server 5 minutes before its
// restart, not 80 s; the readiness probe still takes it out of service
// at once.
const StallFailureThreshold = 30

// ReadinessPeriodSeconds is how often the kubelet asks the API server's
// and the scheduler's /readyz: every 10 s, where kubeadm asks every
// second. Each probe is a new TLS connection, a handshake on both sides;
// on a host short of CPU the kubelet was the largest CPU user of the
// appliance under TCG (session 34's profile: 12 % TLS handshakes), and
// the API server took its share of each. kubeadm, firstboot and the BPA
// wait on /readyz and the components' health endpoints themselves; the
// Pods' Ready condition (firstboot's last step waits for every
// kube-system Pod) shows up to 10 s later, and a failing server is out
// of service after 30 s, not 3.
const ReadinessPeriodSeconds = 10

// StallPatches are kubeadm's patches (file name → strategic merge patch,
// for the folder Patches names) for a host whose CPU may be short: etcd's
// and the API server's static Pods take StallFailureThreshold failed
// liveness probes, and the API server's and the scheduler's readiness
// probes run every ReadinessPeriodSeconds.
func StallPatches() map[string]string {
	const container = "spec:\n  containers:\n  - name: %s\n"
	liveness := fmt.Sprintf("    livenessProbe:\n      failureThreshold: %d\n", StallFailureThreshold)
	readiness := fmt.Sprintf("    readinessProbe:\n      periodSeconds: %d\n", ReadinessPeriodSeconds)
	return map[string]string{
		"etcd+strategic.yaml":           fmt.Sprintf(container, "etcd") + liveness,
		"kube-apiserver+strategic.yaml": fmt.Sprintf(container, "kube-apiserver") + liveness + readiness,
		"kube-scheduler+strategic.yaml": fmt.Sprintf(container, "kube-scheduler") + readiness,
	}
}

// WriteStallPatches writes StallPatches into dir, for a configuration
// whose PatchesDir is dir.
func WriteStallPatches(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("kubeadm's patches: %w", err)
	}
	for name, patch := range StallPatches() {
		if err := atomicfile.Write(filepath.Join(dir, name), []byte(patch), 0o644); err != nil {
			return fmt.Errorf("kubeadm's patches: %w", err)
		}
	}
	return nil
}

// APIServerFirst are the `kubeadm init phase` runs, in order, that start
// etcd and the API server alone; once the API server's /readyz answers,
// `kubeadm init --skip-phases=InitSkipPhases` runs the rest (certificates
// and kubeconfigs it finds made, the same two manifests written again,
// which the kubelet leaves running, then the controller manager and the
// scheduler). Both clusters start so.
//
// On a host short of CPU (a small edge box, a test VM without KVM) the
// four static Pods kubeadm writes at once share it, and the API server
// has one minute to finish its post-start hooks: the service IP repair
// hook (start-service-ip-repair-controllers) fails the server after a
// minute that Kubernetes hard-codes, and every restart starts over. The
// controller manager and the scheduler spend that minute listing and
// watching everything through it, and the application cluster's API
// server crash-looped so under TCG (TestAppClusterDHCPClock, sessions 32
// and 33). Started after /readyz, they take nothing from it.
var APIServerFirst = [][]string{{"certs", "all"}, {"kubeconfig", "all"}, {"etcd", "local"}, {"control-plane", "apiserver"}}

// InitSkipPhases are what the last `kubeadm init` skips: its preflight
// checks (run first, as `kubeadm init phase preflight`, before anything
// is written) and kubelet-start (run on its own before that last init,
// so that the kubelet runs the first static Pods: firstboot runs it
// before APIServerFirst, the application cluster's init.sh after).
const InitSkipPhases = "preflight,kubelet-start"

// LeaderElectionArgs are the flags that give kube-controller-manager and
// kube-scheduler the leader election above.
func LeaderElectionArgs() []Arg {
	return []Arg{
		{"leader-elect-lease-duration", LeaderElectionLeaseDuration.String()},
		{"leader-elect-renew-deadline", LeaderElectionRenewDeadline.String()},
		{"leader-elect-retry-period", LeaderElectionRetryPeriod.String()},
	}
}

// EncryptionMountPath is where the API server sees the encryption config's folder.
const EncryptionMountPath = "/etc/kubernetes/bootstick-encryption"

// Render returns the multi-document YAML for kubeadm init --config.
func Render(c Config) ([]byte, error) {
	if c.BindPort == 0 {
		c.BindPort = 6443
	}
	if c.DNSDomain == "" {
		c.DNSDomain = "cluster.local"
	}
	if c.ClusterName == "" {
		c.ClusterName = "kubernetes"
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	ic := InitConfiguration{TypeMeta: TypeMeta{API, "InitConfiguration"}, Timeouts: SlowMachineTimeouts,
		LocalAPIEndpoint: APIEndpoint{c.AdvertiseAddress, c.BindPort}}
	if c.PatchesDir != "" {
		ic.Patches = &Patches{Directory: c.PatchesDir}
	}
	ic.NodeRegistration = NodeRegistration{Name: c.NodeName, CRISocket: c.CRISocket, ImagePullPolicy: "IfNotPresent",
		Taints: &[]string{}, KubeletExtraArgs: []Arg{{"node-ip", c.AdvertiseAddress}}}

	cc := NewClusterConfiguration(c.ClusterName, c.KubernetesVersion,
		netip.AddrPortFrom(netip.MustParseAddr(c.AdvertiseAddress), uint16(c.BindPort)).String(), c.EncryptionConfigPath)
	cc.ImageRepository = c.ImageRepository
	cc.Networking.PodSubnet = c.PodSubnet
	cc.Networking.ServiceSubnet = c.ServiceSubnet
	cc.Networking.DNSDomain = c.DNSDomain
	cc.Etcd.Local.DataDir = c.EtcdDataDir
	cc.Etcd.Local.ImageTag = c.EtcdImageTag
	cc.DNS.ImageTag = c.CoreDNSImageTag
	cc.APIServer.CertSANs = append([]string{c.AdvertiseAddress}, c.CertSANs...)

	kc := NewKubeletConfiguration(c.CgroupDriver)
	kc.ContainerRuntimeEndpoint = c.CRISocket
	kc.FailSwapOn = new(bool)
	kc.EvictionHard = map[string]string{"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"}
	return Marshal("# Written by firstboot for kubeadm init --config.\n", ic, cc, kc)
}

// CgroupDriver is "systemd" when systemd is PID 1, else "cgroupfs".
func CgroupDriver(systemdIsPID1 bool) string {
	if systemdIsPID1 {
		return "systemd"
	}
	return "cgroupfs"
}
