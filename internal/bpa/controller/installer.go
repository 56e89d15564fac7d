package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	metal3 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/bootstick/bootstick/internal/bpa/install"
	bpa "github.com/bootstick/bootstick/internal/bpa/v1alpha1"
)

// vipMasters is the number of masters from which a cluster ought to have
// a control-plane VIP (the site requires one of a new cluster of as many:
// site.MinMastersForVIP).
const vipMasters = 3

// SSHKeySecret holds the key pair firstboot generated (key ssh-privatekey).
const SSHKeySecret = "bootstick-ssh-key"

// KubeconfigSecretName names the Secret with a cluster's admin kubeconfig
// (key "value").
func KubeconfigSecretName(cluster string) string { return cluster + "-kubeconfig" }

// Backoff for a host that failed: 10 s, doubling, at most 2 minutes (a
// host just provisioned is unreachable until its OS has booted).
var (
	BackoffBase = 10 * time.Second
	BackoffMax  = 2 * time.Minute
	// ReadyPoll is how often the BPA looks at the nodes until all are Ready.
	ReadyPoll = 10 * time.Second
	// ObservePoll is how often a phase reads the cluster's state until
	// it shows the phase done.
	ObservePoll = 10 * time.Second
)

// PhaseDeadlines bound each host's long phases, each on its own: a host
// that passes one has its job killed and is failed and retried, while
// the others go on. They are generous for hosts without KVM (TCG), where
// a package install takes minutes and kubeadm's own timeouts
// (kubeadm.SlowMachineTimeouts: 20 minutes for the control plane, 5 for
// an API call's retries) must run out before the BPA's. An init pulls its
// images, waits for its API server alone (up to those 20 minutes), then
// for the rest of its control plane, and runs that rest once more if it
// failed; a join adds its wait for a Ready node and a started etcd
// member. A cleanup's reads and deletes are short; a removal's drain is
// bounded by DrainTimeout, and the removal as a whole by its own
// deadline.
var PhaseDeadlines = map[string]time.Duration{
	bpa.PhaseInstall: 20 * time.Minute,
	bpa.PhaseCleanup: 5 * time.Minute,
	bpa.PhaseInit:    60 * time.Minute,
	bpa.PhaseJoin:    25 * time.Minute,
	removal:          15 * time.Minute,
}

func backoff(failures int32) time.Duration {
	d := BackoffBase
	for i := int32(1); i < failures && d < BackoffMax; i++ {
		d *= 2
	}
	return min(d, BackoffMax)
}

// provisioned reports whether a host's BareMetalHost has its OS: only then
// does the BPA install it.
func provisioned(st bpa.HostState) bool {
	switch st {
	case bpa.HostProvisioned, bpa.HostInstalling, bpa.HostUnreachable, bpa.HostReady:
		return true
	}
	return false
}

// hasOS reports whether h's BareMetalHost is provisioned, whatever the
// install or role matching made of it.
func hasOS(h *bpa.HostStatus) bool {
	return provisioned(h.State) || ((h.State == bpa.HostError || h.State == bpa.HostUnfit) && h.ProvisionedAt != nil)
}

// clusterName is the Provisioning's cluster label, or its name.
func clusterName(p *bpa.Provisioning) string {
	if c := p.Labels["cluster"]; c != "" {
		return c
	}
	return p.Name
}

// plugins are the Provisioning's KUD plugins, with the pod network first:
// a cluster without one has no Ready node.
func plugins(spec bpa.ProvisioningSpec) []string {
	out := []string{install.PluginFlannel}
	for _, p := range spec.KUDPlugins {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// run is one pass of installing a Provisioning's hosts.
type run struct {
	r    *Reconciler
	p    *bpa.Provisioning
	bmhs map[string]*metal3.BareMetalHost
	cfg  *install.Config
	key  ssh.Signer
	cl   install.Cluster
	now  func() time.Time
	// connect opens an executor on a host.
	connect install.Connector
	// mu guards the status, requeue and clients: hosts are installed at
	// once.
	mu sync.Mutex
	// requeue is the soonest the pass wants to run again (0: no need).
	requeue time.Duration
	clients map[string]install.Executor
	// encKey is the cluster's key for Secrets at rest (nil while it
	// cannot be read: masters then wait).
	encKey []byte
}

// wantAgain asks for another pass after d; x.mu must be held.
func (x *run) wantAgain(d time.Duration) {
	if d > 0 && (x.requeue == 0 || d < x.requeue) {
		x.requeue = d
	}
}

func (x *run) host(name string) *bpa.HostStatus {
	for i := range x.p.Status.Hosts {
		if x.p.Status.Hosts[i].Name == name {
			return &x.p.Status.Hosts[i]
		}
	}
	return nil
}

// Install installs every provisioned host of p and forms the cluster: the
// first master (by name) first, then the others as they are provisioned.
// p.Status.Hosts must be current. Each phase is written to the status as
// it starts and ends; a phase that ended for the host's current
// provisioning is not run again. Once the cluster exists, the BPA works
// through a master in it (the contact) and never makes it again; hosts
// provisioned again are cleaned from it before they join back, and nodes
// no host names any more are removed (cleanup.go).
func (r *Reconciler) Install(ctx context.Context, p *bpa.Provisioning, bmhs []metal3.BareMetalHost) (time.Duration, error) {
	x := &run{r: r, p: p, bmhs: map[string]*metal3.BareMetalHost{}, now: r.clock(), clients: map[string]install.Executor{}}
	defer func() {
		for _, c := range x.clients {
			c.Close()
		}
	}()
	for i := range bmhs {
		x.bmhs[bmhs[i].Name] = &bmhs[i]
	}
	first := x.firstMaster()
	if first == nil {
		return 0, x.refuse(ctx, "NoMaster", "the Provisioning names no master: a cluster needs one")
	}
	contact := x.contact()
	if contact == nil && !hasOS(first) {
		return 0, nil // nothing to do before the first master has its OS
	}
	if ready, again, err := x.setup(ctx); !ready {
		return again, err
	}
	exists, err := x.clusterExists(ctx)
	if err != nil {
		return 0, err
	}
	maker := first
	if contact != nil {
		maker = nil
	} else if exists {
		var again time.Duration
		if maker, again, err = x.findCluster(ctx, first); maker == nil {
			return again, err
		}
	}
	// The cluster lives when a master the BPA recorded is in it, or when
	// its kubeconfig Secret exists (then maker is the first master, whose
	// disk holds the cluster): its key is on that master's disk.
	holder := contact
	if holder == nil && exists {
		holder = maker
	}
	if x.encKey, err = x.encryptionKey(ctx, holder); err != nil {
		return 0, err
	}
	x.makeNodes(ctx, maker, contact)
	if contact == nil && inCluster(maker) {
		contact = maker
		if exists, err = x.clusterExists(ctx); err != nil { // its init stored the kubeconfig
			return 0, err
		}
	}
	if contact == nil {
		return x.requeue, x.save(ctx)
	}
	x.removeStrangers(ctx, contact)
	x.readyPhase(ctx, contact, exists)
	return x.requeue, x.save(ctx)
}

// setup reads what the install needs besides the Provisioning: the
// install ConfigMap, the plugins, the SSH key. It reports whether the
// install can go on; when not, it refused with the reason in the status
// and says when to look again.
func (x *run) setup(ctx context.Context) (bool, time.Duration, error) {
	r, p := x.r, x.p
	var cm corev1.ConfigMap
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: install.ConfigMapName}, &cm); err != nil {
		if apierrors.IsNotFound(err) {
			return false, time.Minute, x.refuse(ctx, "NoInstallConfig", fmt.Sprintf("no ConfigMap %s/%s: firstboot's site step writes it", p.Namespace, install.ConfigMapName))
		}
		return false, 0, fmt.Errorf("reading ConfigMap %s/%s: %w", p.Namespace, install.ConfigMapName, err)
	}
	cfg, err := install.ParseConfig(cm.Data[install.ConfigKey])
	if err != nil {
		return false, 0, x.refuse(ctx, "BadInstallConfig", err.Error())
	}
	// Hosts applied with kubectl: host keys and addresses from their
	// BareMetalHosts' annotations (userdata.go).
	cfg = annotated(cfg, p.Status.Hosts, x.bmhs)
	x.cfg = cfg
	pl := plugins(p.Spec)
	if unknown := cfg.UnknownPlugins(pl); len(unknown) > 0 {
		return false, 0, x.refuse(ctx, "UnknownPlugin", fmt.Sprintf("KUD plugins %s are not on this stick, which serves %s: remove them from the site's cluster.kudPlugins",
			strings.Join(unknown, ", "), strings.Join(cfg.PluginNames(), ", ")))
	}
	var keySecret corev1.Secret
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: SSHKeySecret}, &keySecret); err != nil {
		if apierrors.IsNotFound(err) {
			return false, time.Minute, x.refuse(ctx, "NoSSHKey", fmt.Sprintf("no Secret %s/%s: firstboot's site step writes it", p.Namespace, SSHKeySecret))
		}
		return false, 0, fmt.Errorf("reading Secret %s/%s: %w", p.Namespace, SSHKeySecret, err)
	}
	if x.key, err = ssh.ParsePrivateKey(keySecret.Data[corev1.SSHAuthPrivateKey]); err != nil {
		// The parser's message never quotes the key.
		return false, 0, x.refuse(ctx, "BadSSHKey", fmt.Sprintf("Secret %s/%s: key %s is not an SSH private key", p.Namespace, SSHKeySecret, corev1.SSHAuthPrivateKey))
	}
	x.cl = baseCluster(p, cfg)
	x.cl.Plugins, x.cl.Schedulable = pl, Schedulable(p.Spec)
	if m := x.firstMaster(); m != nil {
		x.cl.FirstMaster = m.Name
	}
	executors := r.Executors
	if executors == nil {
		executors = install.SSH
	}
	x.connect = executors(cfg, x.key)
	return true, 0, nil
}

// makeNodes takes each provisioned host not yet in the cluster its own
// way, all at once: connect, install, then init (maker, when the cluster
// is to be made) or, once it is made, cleanup and join through contact
// (or the maker). A host that is slow, silent or failing holds no other:
// each phase has its own deadline.
func (x *run) makeNodes(ctx context.Context, maker, contact *bpa.HostStatus) {
	initOver := make(chan struct{}) // closed once the maker's init was tried, or when there is none
	var initOnce sync.Once
	endInit := func() { initOnce.Do(func() { close(initOver) }) }
	if maker == nil {
		endInit()
	}
	// Masters join one at a time: etcd grows by one member at a time.
	var masterJoin sync.Mutex
	var wg sync.WaitGroup
	for i := range x.p.Status.Hosts {
		h := &x.p.Status.Hosts[i]
		if !hasOS(h) || inCluster(h) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if h == maker {
				defer endInit()
			}
			if !x.prepare(ctx, h) {
				return
			}
			if h == maker {
				x.makeNode(ctx, h, nil)
				return
			}
			select {
			case <-initOver:
			case <-ctx.Done():
				return
			}
			via := contact
			if via == nil && inCluster(maker) {
				via = maker
			}
			if via == nil {
				return
			}
			if h.Role == RoleMaster {
				masterJoin.Lock()
				defer masterJoin.Unlock()
			}
			if x.cleanup(ctx, h, via) {
				x.makeNode(ctx, h, via)
			}
		}()
	}
	wg.Wait()
}

// inCluster reports whether h was made a node (init or join).
func inCluster(h *bpa.HostStatus) bool {
	return phaseDone(h, bpa.PhaseInit) || phaseDone(h, bpa.PhaseJoin)
}

func (r *Reconciler) clock() func() time.Time { return clockOr(r.Now) }

// clockOr is a reconciler's clock: now, or time.Now when now is nil.
func clockOr(now func() time.Time) func() time.Time {
	if now != nil {
		return now
	}
	return time.Now
}

// firstMaster is the Provisioning's first master by name, in the
// cluster or not.
func (x *run) firstMaster() *bpa.HostStatus {
	for i := range x.p.Status.Hosts {
		if x.p.Status.Hosts[i].Role == RoleMaster {
			return &x.p.Status.Hosts[i]
		}
	}
	return nil
}
