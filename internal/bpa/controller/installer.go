package controller

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"net"

	metal3 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/bootstick/bootstick/internal/bpa/install"
	bpa "github.com/bootstick/bootstick/internal/bpa/v1alpha1"
)

// vipMasters is the number of masters from which a cluster ought to have
// a control-plane VIP (the site requires one of a new cluster of as many:
// site.MinMastersForVIP).
const vipMasters = 3

// ConditionClusterReady is True when every host is a Ready node of the
// application cluster.
const ConditionClusterReady = "ClusterReady"

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
// a package install takes minutes and kubeadm's own timeouts, which the
// scripts set to 20 minutes for the control plane (see timeouts in
// package install), must run out before the BPA's; a join adds its wait
// for a Ready node and a started etcd member. A cleanup's reads and
// deletes are short; a removal's drain is bounded by DrainTimeout, and
// the removal as a whole by its own deadline.
var PhaseDeadlines = map[string]time.Duration{
	bpa.PhaseInstall: 20 * time.Minute,
	bpa.PhaseCleanup: 5 * time.Minute,
	bpa.PhaseInit:    25 * time.Minute,
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

// installed reports whether a host's BareMetalHost has its OS: only then
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

// save writes the status now, so that each phase shows as it happens.
func (x *run) save(ctx context.Context) error {
	x.setClusterCondition()
	// Ready too: role matching moves hosts to and from Unfit.
	ready := readyCondition(x.p.Status.Hosts, x.p.Generation)
	ready.LastTransitionTime = metav1.NewTime(x.now().Truncate(time.Second))
	meta.SetStatusCondition(&x.p.Status.Conditions, ready)
	// Update a copy: decoding the answer into x.p would move the hosts
	// that the pass holds pointers to.
	cp := x.p.DeepCopy()
	if err := x.r.Client.Status().Update(ctx, cp); err != nil {
		return fmt.Errorf("writing the status of provisioning %s/%s: %w", x.p.Namespace, x.p.Name, err)
	}
	x.p.ResourceVersion = cp.ResourceVersion
	return nil
}

func (x *run) setClusterCondition() {
	ready, unreachable, failed := 0, 0, 0
	for _, h := range x.p.Status.Hosts {
		switch h.State {
		case bpa.HostReady:
			ready++
		case bpa.HostUnreachable:
			unreachable++
		case bpa.HostError:
			failed++
		}
	}
	n := len(x.p.Status.Hosts)
	nUnfit, unfit := unfitHosts(x.p.Status.Hosts)
	first := x.firstMaster()
	switch {
	case n > 0 && ready == n:
		x.setCondition(ConditionClusterReady, metav1.ConditionTrue, "AllNodesReady", fmt.Sprintf("%d nodes Ready; kubeconfig in Secret %s", n, x.p.Status.KubeconfigSecret))
	case first != nil && first.State == bpa.HostUnfit && x.contact() == nil:
		x.setCondition(ConditionClusterReady, metav1.ConditionFalse, ReasonFirstMasterUnfit, fmt.Sprintf(
			"the cluster is not made: master %s, the first by name, on which kubeadm init makes it, does not fit its requirements (%s), "+
				"and no host joins before it does. Give it the hardware, or change its requirements in the site", first.Name, first.Error))
	case failed > 0 || unreachable > 0:
		msg := fmt.Sprintf("%d of %d nodes Ready, %d unreachable, %d failed", ready, n, unreachable, failed)
		if nUnfit > 0 {
			msg += fmt.Sprintf(", %d not fitting their requirements: %s", nUnfit, unfit)
		}
		x.setCondition(ConditionClusterReady, metav1.ConditionFalse, "HostsFailing", msg)
	case nUnfit > 0:
		x.setCondition(ConditionClusterReady, metav1.ConditionFalse, ReasonHostsUnfit,
			fmt.Sprintf("%d of %d nodes Ready; %d not fitting their requirements, on which the BPA installs nothing: %s", ready, n, nUnfit, unfit))
	default:
		x.setCondition(ConditionClusterReady, metav1.ConditionFalse, "Installing", fmt.Sprintf("%d of %d nodes Ready", ready, n))
	}
}

// setCondition sets condition typ of the status.
func (x *run) setCondition(typ string, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&x.p.Status.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg,
		ObservedGeneration: x.p.Generation, LastTransitionTime: metav1.NewTime(x.now().Truncate(time.Second))})
}

// refuse marks the cluster as not installable, for a reason the operator
// must fix.
func (x *run) refuse(ctx context.Context, reason, msg string) error {
	x.setCondition(ConditionClusterReady, metav1.ConditionFalse, reason, msg)
	ctrl.LoggerFrom(ctx).Info("not installing the cluster", "reason", reason, "message", msg)
	x.r.event(ref(x.p), true, reason, "Refuse", "not installing the cluster: "+msg)
	cp := x.p.DeepCopy()
	return x.r.Client.Status().Update(ctx, cp)
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

func (r *Reconciler) clock() func() time.Time {
	if r.Now != nil {
		return r.Now
	}
	return time.Now
}

// phaseDone reports whether h finished phase name.
func phaseDone(h *bpa.HostStatus, name string) bool {
	for _, ph := range h.Phases {
		if ph.Name == name && ph.Finished != nil {
			return true
		}
	}
	return false
}

// begin records phase name as started (again, when it was cut short).
func (x *run) begin(ctx context.Context, h *bpa.HostStatus, name string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	t := metav1.NewTime(x.now().Truncate(time.Second))
	h.Phases = slices.DeleteFunc(h.Phases, func(ph bpa.Phase) bool { return ph.Name == name })
	h.Phases = append(h.Phases, bpa.Phase{Name: name, Started: t})
	if h.State != bpa.HostInstalling {
		h.State, h.LastUpdated = bpa.HostInstalling, &t
	}
	if err := x.save(ctx); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "recording a phase's start", "host", h.Name, "phase", name)
	}
	ctrl.LoggerFrom(ctx).Info("phase started", "host", h.Name, "phase", name)
	x.r.event(ref(x.p), false, ReasonPhaseStarted, name, fmt.Sprintf("host %s: phase %s started", h.Name, name))
}

func (x *run) end(ctx context.Context, h *bpa.HostStatus, name string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	t := metav1.NewTime(x.now().Truncate(time.Second))
	for i := range h.Phases {
		if h.Phases[i].Name == name {
			h.Phases[i].Finished = &t
			h.Phases[i].Duration = t.Sub(h.Phases[i].Started.Time).String()
			ctrl.LoggerFrom(ctx).Info("phase done", "host", h.Name, "phase", name, "took", h.Phases[i].Duration)
			x.r.event(ref(x.p), false, ReasonPhaseFinished, name, fmt.Sprintf("host %s: phase %s finished in %s", h.Name, name, h.Phases[i].Duration))
		}
	}
	h.Error, h.Failures, h.NextRetry = "", 0, nil
	if err := x.save(ctx); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "recording a phase's end", "host", h.Name, "phase", name)
	}
}

// fail records a failed phase: the host is Unreachable or in Error, and
// is tried again after a backoff.
func (x *run) fail(ctx context.Context, h *bpa.HostStatus, phase string, err error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	h.Failures++
	wait := backoff(h.Failures)
	next := metav1.NewTime(x.now().Add(wait).Truncate(time.Second))
	h.NextRetry = &next
	st := bpa.HostError
	var un *install.UnreachableError
	if errors.As(err, &un) {
		st = bpa.HostUnreachable
	}
	if h.State != st {
		t := metav1.NewTime(x.now().Truncate(time.Second))
		h.State, h.LastUpdated = st, &t
	}
	// Errors of jobs and queries are redacted where they are made; this
	// masks anything shaped like a token that came another way.
	h.Error = install.Redact(fmt.Sprintf("%s: %v (try %d; next at %s)", phase, err, h.Failures, next.UTC().Format(time.TimeOnly)))
	// The next try connects anew; this connection is closed, not leaked.
	if c := x.clients[h.Name]; c != nil {
		c.Close()
	}
	delete(x.clients, h.Name)
	x.wantAgain(wait)
	ctrl.LoggerFrom(ctx).Info("phase failed", "host", h.Name, "phase", phase, "error", h.Error)
	reason := ReasonPhaseFailed
	if st == bpa.HostUnreachable {
		reason = ReasonHostUnreachable
	}
	x.r.event(ref(x.p), true, reason, phase, fmt.Sprintf("host %s: %s", h.Name, h.Error))
}

// waiting reports whether h is in its backoff.
func (x *run) waiting(h *bpa.HostStatus) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if h.NextRetry != nil && x.now().Before(h.NextRetry.Time) {
		x.wantAgain(h.NextRetry.Sub(x.now()))
		return true
	}
	return false
}

func (x *run) client(ctx context.Context, h *bpa.HostStatus) (install.Executor, error) {
	x.mu.Lock()
	c := x.clients[h.Name]
	x.mu.Unlock()
	if c != nil {
		return c, nil
	}
	c, err := x.connect(ctx, h.Name, h.Address)
	if err != nil {
		return nil, err
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if old := x.clients[h.Name]; old != nil {
		c.Close() // another goroutine connected first
		return old, nil
	}
	x.clients[h.Name] = c
	return c, nil
}

// step runs phase name of h with f (unless it ended before; connect
// always dials), recording its start and end, or the failure. f gets a
// context bounded by the phase's deadline.
func (x *run) step(ctx context.Context, h *bpa.HostStatus, name string, f func(ctx context.Context, c install.Executor) error) bool {
	if name != bpa.PhaseConnect && phaseDone(h, name) {
		return true
	}
	if !phaseDone(h, name) {
		x.begin(ctx, h, name)
	}
	// The phase's own deadline bounds its work, not the recording of its
	// end or failure.
	pctx := ctx
	if d := PhaseDeadlines[name]; d > 0 {
		var cancel context.CancelFunc
		pctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	c, err := x.client(pctx, h)
	if err == nil && f != nil {
		err = f(pctx, c)
	}
	if err != nil {
		x.fail(ctx, h, name, err)
		return false
	}
	if !phaseDone(h, name) {
		x.end(ctx, h, name)
	}
	return true
}

// prepare connects to h, checks it against its requirements (fit.go)
// and installs the packages, unless h waits out a backoff. It reports
// whether h is installed.
func (x *run) prepare(ctx context.Context, h *bpa.HostStatus) bool {
	if x.waiting(h) {
		return false
	}
	// The site's address (or the BareMetalHost's annotation's), each
	// pass: the ConfigMap may have changed.
	x.mu.Lock()
	h.Address = x.cfg.Hosts[h.Name].Address
	if h.Address == "" {
		h.Address = bootAddress(x.bmhs[h.BareMetalHost], h.MACAddress)
	}
	x.mu.Unlock()
	if !x.step(ctx, h, bpa.PhaseConnect, nil) {
		return false
	}
	if !x.checkFit(ctx, h) {
		return false // nothing runs on a host that lacks what its role requires
	}
	return x.step(ctx, h, bpa.PhaseInstall, func(ctx context.Context, c install.Executor) error {
		t := install.Target{Name: h.Name, Address: hostOnly(h.Address), Master: h.Role == RoleMaster}
		var secrets []string
		if t.Master {
			t.EncryptionKey = x.encKey
			secrets = []string{base64.StdEncoding.EncodeToString(x.encKey)}
		}
		script, err := install.InstallScript(x.cfg, x.cl, t)
		if err != nil {
			return err
		}
		_, err = c.Run(ctx, install.Job{Name: bpa.PhaseInstall, Script: script, Secrets: secrets, Deadline: PhaseDeadlines[bpa.PhaseInstall]})
		return err
	})
}

// makeNode runs kubeadm init on an installed h (via nil: h makes the
// cluster), or joins it through master via.
func (x *run) makeNode(ctx context.Context, h, via *bpa.HostStatus) bool {
	if inCluster(h) {
		return true
	}
	if via == nil {
		return x.step(ctx, h, bpa.PhaseInit, func(ctx context.Context, c install.Executor) error { return x.initCluster(ctx, c, h) })
	}
	return x.step(ctx, h, bpa.PhaseJoin, func(ctx context.Context, c install.Executor) error { return x.join(ctx, c, h, via) })
}

// initCluster makes the cluster on the first master, waits until it
// answers with its addons and bootstrap RBAC, stores its kubeconfig, and
// applies the plugins.
func (x *run) initCluster(ctx context.Context, c install.Executor, h *bpa.HostStatus) error {
	cl := x.cl
	if n := len(x.p.Spec.Masters); cl.VIP == "" && n >= vipMasters {
		x.r.event(ref(x.p), true, "NoControlPlaneVIP", "Init", fmt.Sprintf("making cluster %s of %d masters without a controlPlaneVIP: "+
			"its API endpoint is master %s's address, and the API stops answering when that host does", cl.Name, n, h.Name))
	}
	cl.Endpoint = hostOnly(h.Address)
	script, err := install.InitScript(x.cfg, cl, h.Name, hostOnly(h.Address))
	if err != nil {
		return err
	}
	if _, err := c.Run(ctx, install.Job{Name: bpa.PhaseInit, Script: script, Deadline: PhaseDeadlines[bpa.PhaseInit]}); err != nil {
		return err
	}
	if err := x.observe(ctx, h.Name, bpa.PhaseInit, func() ([]string, error) { return install.InitMissing(ctx, c) }); err != nil {
		return err
	}
	if err := x.storeKubeconfig(ctx, c); err != nil {
		return err
	}
	// The pod network, without which no node is Ready. The other KUD
	// plugins are a ContainerPackages' (syncKUDPackages), installed once
	// the cluster is.
	m, err := install.PluginManifest(x.cfg, cl, install.PluginFlannel)
	if err != nil {
		return err
	}
	return install.Apply(ctx, c, "the pod network ("+install.PluginFlannel+")", m)
}

// observe waits until missing reports nothing missing: the phase's
// observed state. It reads every ObservePoll until the phase's deadline
// (ctx's), and then fails with what was still missing.
func (x *run) observe(ctx context.Context, host, phase string, missing func() ([]string, error)) error {
	t := time.NewTicker(ObservePoll)
	defer t.Stop()
	for {
		m, err := missing()
		if err != nil {
			return err
		}
		if len(m) == 0 {
			return nil
		}
		ctrl.LoggerFrom(ctx).Info("waiting for the cluster", "host", host, "phase", phase, "missing", strings.Join(m, "; "))
		select {
		case <-t.C:
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return &install.DeadlineError{Host: host, Phase: phase, Deadline: PhaseDeadlines[phase], Detail: "still " + strings.Join(m, "; ")}
			}
			return ctx.Err()
		}
	}
}

// storeKubeconfig copies the admin kubeconfig into the cluster's Secret.
// The Secret is labelled with the cluster's name and owned by nothing:
// it is the only admin credential of a running cluster, so deleting the
// Provisioning must not take it along (an ownerReference a BPA before
// this one set is dropped).
func (x *run) storeKubeconfig(ctx context.Context, master install.Querier) error {
	kc, err := install.Kubeconfig(ctx, master)
	if err != nil {
		return err
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: KubeconfigSecretName(x.cl.Name), Namespace: x.p.Namespace}}
	op, err := controllerutil.CreateOrUpdate(ctx, x.r.Client, s, func() error {
		if s.Labels == nil {
			s.Labels = map[string]string{}
		}
		s.Labels[ClusterLabel] = x.cl.Name
		s.Type = corev1.SecretTypeOpaque
		s.Data = map[string][]byte{KubeconfigKey: kc}
		release(s, x.p)
		return nil
	})
	if err != nil {
		return fmt.Errorf("storing the kubeconfig in Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	x.mu.Lock()
	x.p.Status.KubeconfigSecret = s.Name
	x.mu.Unlock()
	if op != controllerutil.OperationResultNone {
		x.r.event(ref(x.p), false, ReasonKubeconfigStored, "StoreKubeconfig",
			fmt.Sprintf("the admin kubeconfig of cluster %s is in Secret %s/%s (key %s)", x.cl.Name, s.Namespace, s.Name, KubeconfigKey))
	}
	return nil
}

// join joins h through master via (the first master, or the contact
// while the first is away), and waits until the node is Ready and, for a
// master, its etcd member started and healthy.
func (x *run) join(ctx context.Context, c install.Executor, h, via *bpa.HostStatus) error {
	m, err := x.client(ctx, via)
	if err != nil {
		return fmt.Errorf("reaching master %s: %w", via.Name, err)
	}
	master := h.Role == RoleMaster
	j, err := install.JoinSecrets(ctx, m, master)
	if err != nil {
		return err
	}
	cl := x.cl
	cl.Endpoint = hostOnly(via.Address)
	script, err := install.JoinScript(cl, h.Name, hostOnly(h.Address), master, j)
	if err != nil {
		return err
	}
	if _, err := c.Run(ctx, install.Job{Name: bpa.PhaseJoin, Script: script, Secrets: []string{j.Token, j.CertificateKey},
		Deadline: PhaseDeadlines[bpa.PhaseJoin]}); err != nil {
		return err
	}
	return x.observe(ctx, h.Name, bpa.PhaseJoin, func() ([]string, error) { return install.JoinMissing(ctx, m, h.Name, master) })
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

// readyPhase marks each host in the cluster Ready once its node is,
// reading the nodes on master via. It stores the admin kubeconfig again
// when the Secret is gone (exists false) or the status names none: the
// cluster lives, and the Secret is its durable evidence.
func (x *run) readyPhase(ctx context.Context, via *bpa.HostStatus, exists bool) {
	var waiting []*bpa.HostStatus
	for i := range x.p.Status.Hosts {
		h := &x.p.Status.Hosts[i]
		if inCluster(h) && !phaseDone(h, bpa.PhaseReady) {
			if !phaseStarted(h, bpa.PhaseReady) {
				x.begin(ctx, h, bpa.PhaseReady)
			}
			waiting = append(waiting, h)
		}
	}
	if len(waiting) == 0 && exists && x.p.Status.KubeconfigSecret != "" {
		return
	}
	m, err := x.client(ctx, via)
	var ready map[string]bool
	if err == nil && len(waiting) > 0 {
		ready, err = install.NodesReady(ctx, m)
	}
	if err != nil {
		x.fail(ctx, via, bpa.PhaseReady, err)
		return
	}
	for _, h := range waiting {
		if ready[h.Name] {
			x.end(ctx, h, bpa.PhaseReady)
			t := metav1.NewTime(x.now().Truncate(time.Second))
			h.State, h.LastUpdated = bpa.HostReady, &t
		} else {
			x.wantAgain(ReadyPoll)
		}
	}
	if !exists || x.p.Status.KubeconfigSecret == "" {
		if err := x.storeKubeconfig(ctx, m); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "storing the kubeconfig")
		}
	}
}

// bootAddress is the address inspection saw on the boot NIC: for hosts
// the site gives no static address (their OS takes one by DHCP on the
// same NIC).
func bootAddress(b *metal3.BareMetalHost, mac string) string {
	if b == nil || b.Status.HardwareDetails == nil {
		return ""
	}
	for _, n := range b.Status.HardwareDetails.NIC {
		if NormalizeMAC(n.MAC) == mac && n.IP != "" {
			return n.IP
		}
	}
	return ""
}

// hostOnly drops a port from an address.
func hostOnly(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}
