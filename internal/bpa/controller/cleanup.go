package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/bootstick/bootstick/internal/bpa/install"
	bpa "github.com/bootstick/bootstick/internal/bpa/v1alpha1"
)

// Once the cluster exists the BPA keeps it to the hosts of the
// Provisioning: it never makes it again, cleans a host provisioned again
// from it before the host joins back, and removes the nodes no host
// names any more. It works through the contact: the first master by
// name that its record shows in the cluster.

// ConditionNodesRemoved is False while a node that no host of the
// Provisioning names is being removed from the cluster, or when its
// removal failed or was refused; True once the cluster holds none. It
// is set only once there was one to remove.
const ConditionNodesRemoved = "NodesRemoved"

// Reasons of the re-provisioning and removal Events and conditions.
const (
	ReasonOnlyMasterReprovisioned = "OnlyMasterReprovisioned"
	ReasonRemoving                = "Removing"
	ReasonRemoved                 = "Removed"
	ReasonDrainFailed             = "DrainFailed"
	ReasonRemovalFailed           = "RemovalFailed"
	ReasonEndpointMaster          = "EndpointMaster"
	ReasonLastMaster              = "LastMaster"
)

// removal names a removal's deadline in PhaseDeadlines, and what it is
// in its errors.
const removal = "remove"

// DrainTimeout bounds a removed node's drain (kubectl drain --timeout):
// the pods of a host that is gone never finish terminating, and its
// removal goes on without them.
var DrainTimeout = 5 * time.Minute

// contact is the master the BPA works through: the first by name that
// its record shows in the cluster. That is the first master, unless it
// was provisioned again (its record dropped) and has not joined back.
func (x *run) contact() *bpa.HostStatus {
	for i := range x.p.Status.Hosts {
		if h := &x.p.Status.Hosts[i]; h.Role == RoleMaster && inCluster(h) {
			return h
		}
	}
	return nil
}

// clusterExists reports whether the cluster was made: its kubeconfig
// Secret exists. The Secret is the durable evidence, not the status's
// kubeconfigSecret: it outlives the Provisioning (owned by nothing, see
// finalize), so a Provisioning made anew, with an empty status, still
// finds its cluster; and deleting it is the operator's one explicit,
// safe act that lets the BPA make a new cluster (see findCluster). It is
// looked up by name, the name the operator reads it by: one stored
// before the BPA labelled it counts too.
func (x *run) clusterExists(ctx context.Context) (bool, error) {
	name := KubeconfigSecretName(x.cl.Name)
	var s corev1.Secret
	err := x.r.Client.Get(ctx, types.NamespacedName{Namespace: x.p.Namespace, Name: name}, &s)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading Secret %s/%s: %w", x.p.Namespace, name, err)
	}
	return true, nil
}

// findCluster decides, for a cluster that exists while no master's
// record shows it in the cluster, whether first still holds it. Its disk
// does when it has the init mark (the BPA lost its record, the host not
// its disk): first is returned, and its init ends at that mark without
// running kubeadm. Otherwise first was provisioned again (or is new) and
// the cluster's only master with it: its etcd, the cluster's state, is
// gone, and the BPA refuses to make a second cluster beside the first.
func (x *run) findCluster(ctx context.Context, first *bpa.HostStatus) (*bpa.HostStatus, time.Duration, error) {
	if x.waiting(first) || !x.step(ctx, first, bpa.PhaseConnect, nil) {
		return nil, x.requeue, x.save(ctx)
	}
	c, err := x.client(ctx, first)
	var marks install.Marks
	if err == nil {
		marks, err = install.ReadMarks(ctx, c)
	}
	if err != nil {
		x.fail(ctx, first, bpa.PhaseConnect, err)
		return nil, x.requeue, x.save(ctx)
	}
	if marks.Init {
		return first, 0, nil
	}
	secret := x.p.Namespace + "/" + KubeconfigSecretName(x.cl.Name)
	// Secrets are not watched: look again for the operator's answer.
	return nil, time.Minute, x.refuse(ctx, ReasonOnlyMasterReprovisioned, fmt.Sprintf(
		"cluster %s was made (Secret %s holds its admin kubeconfig), but no master of the Provisioning is in it: "+
			"the disk of %s holds no node (it was provisioned again, or is new) and no other master is recorded in the cluster, "+
			"so the cluster's etcd, its whole state, went with that disk. The BPA does not make a second cluster beside the first. "+
			"To make a new one on purpose, delete Secret %s (keep a copy if you need the old one) and provision the other hosts again: "+
			"the BPA then runs kubeadm init on %s and joins them to the new cluster",
		x.cl.Name, secret, first.Name, secret, first.Name))
}

// cleanup makes the cluster forget what an earlier life of h left in it,
// before h's first join of its current provisioning: its Node and, for a
// master, its etcd member, which a host provisioned again leaves behind
// (a control-plane join fails on the old member, "peer URL exists", and
// a dead member counts against etcd's quorum). It reads the cluster on
// master via and the kubeadm marks on h's disk: a disk with a mark holds
// the node the cluster has (the BPA lost its record, not the host its
// disk), which is left as it is. It reports whether h may join.
func (x *run) cleanup(ctx context.Context, h, via *bpa.HostStatus) bool {
	if phaseStarted(h, bpa.PhaseJoin) {
		return true // what the cluster holds of h is this provisioning's
	}
	m, err := x.client(ctx, via)
	if err != nil {
		x.fail(ctx, h, bpa.PhaseCleanup, fmt.Errorf("reaching master %s: %w", via.Name, err))
		return false
	}
	st, err := install.ReadCluster(ctx, m)
	var marks install.Marks
	if err == nil {
		marks, err = x.marks(ctx, h)
	}
	switch {
	case err != nil:
	case st.Holds(h.Name) == marks.Any():
		return true // nothing of h in the cluster, or its own node
	case marks.Any():
		err = fmt.Errorf("the disk of %s holds a node kubeadm made (/etc/bootstick/kubeadm-*.done), but the cluster has no Node %s: "+
			"it was removed from the cluster while its disk was kept. Provision it again, or run kubeadm reset --force and "+
			"rm -f /etc/bootstick/kubeadm-*.done on it", h.Name, h.Name)
	default:
		return x.step(ctx, h, bpa.PhaseCleanup, func(ctx context.Context, _ install.Executor) error {
			return x.forget(ctx, m, h.Name, bpa.PhaseCleanup, st)
		})
	}
	x.fail(ctx, h, bpa.PhaseCleanup, err)
	return false
}

// marks reads the kubeadm marks on h's disk.
func (x *run) marks(ctx context.Context, h *bpa.HostStatus) (install.Marks, error) {
	c, err := x.client(ctx, h)
	if err != nil {
		return install.Marks{}, err
	}
	return install.ReadMarks(ctx, c)
}

// forget removes node's etcd members and deletes its Node on master m,
// and waits until the cluster shows neither (phase names the wait).
func (x *run) forget(ctx context.Context, m install.Executor, node, phase string, st install.ClusterState) error {
	for _, mem := range st.Named(node) {
		if err := install.RemoveMember(ctx, m, mem); err != nil {
			return err
		}
	}
	if err := install.DeleteNode(ctx, m, node); err != nil {
		return err
	}
	return x.observe(ctx, node, phase, func() ([]string, error) {
		st, err := install.ReadCluster(ctx, m)
		if left := st.Left(node); err == nil && left != "" {
			return []string{"the cluster still holds " + left}, nil
		}
		return nil, err
	})
}

// phaseStarted reports whether h started phase name.
func phaseStarted(h *bpa.HostStatus, name string) bool {
	return slices.ContainsFunc(h.Phases, func(ph bpa.Phase) bool { return ph.Name == name })
}

// refusal is a removal the BPA will not make.
type refusal struct{ reason, msg string }

func (r *refusal) Error() string { return r.msg }

// removeStrangers removes from the cluster, one at a time, each node
// that no host of the Provisioning names any more (a Node or an etcd
// member of that name), through master via: drained (for at most
// DrainTimeout), its etcd member removed (a master), its Node deleted,
// until the cluster shows neither. It never removes the master whose
// address is the cluster's API endpoint, nor the last master. The
// BareMetalHost is not the BPA's: deprovisioning it is the site tool's.
func (x *run) removeStrangers(ctx context.Context, via *bpa.HostStatus) {
	m, err := x.client(ctx, via)
	var st install.ClusterState
	if err == nil {
		st, err = install.ReadCluster(ctx, m)
	}
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "reading the cluster for nodes to remove", "master", via.Name)
		if c := meta.FindStatusCondition(x.p.Status.Conditions, ConditionNodesRemoved); c != nil && c.Status != metav1.ConditionTrue {
			x.wantAgain(BackoffMax)
		}
		return
	}
	var refused []string
	for _, node := range x.strangers(st) {
		err := x.remove(ctx, m, st, node)
		var no *refusal
		switch {
		case errors.As(err, &no):
			refused = append(refused, no.reason)
			x.removalCondition(ctx, no.reason, no.msg)
			x.r.event(ref(x.p), true, no.reason, "Remove", no.msg)
		case err != nil:
			msg := install.Redact(fmt.Sprintf("removing node %s: %v", node, err))
			x.removalCondition(ctx, ReasonRemovalFailed, msg)
			x.r.event(ref(x.p), true, ReasonRemovalFailed, "Remove", msg)
			x.wantAgain(BackoffMax)
			return
		}
	}
	if len(refused) == 0 && meta.FindStatusCondition(x.p.Status.Conditions, ConditionNodesRemoved) != nil {
		x.mu.Lock()
		x.setCondition(ConditionNodesRemoved, metav1.ConditionTrue, ReasonRemoved, "the cluster holds no node or etcd member that no host of the Provisioning names")
		x.mu.Unlock()
	}
}

// strangers are the names of the cluster's Nodes and etcd members that
// no host of the Provisioning names, sorted.
func (x *run) strangers(st install.ClusterState) []string {
	named := map[string]bool{}
	for _, h := range x.p.Status.Hosts {
		named[h.Name] = true
	}
	seen := map[string]bool{}
	var out []string
	add := func(name string) {
		if name != "" && !named[name] && !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	for n := range st.Nodes {
		add(n)
	}
	for _, mem := range st.Members {
		add(mem.Name) // a member added but not started has no name yet
	}
	sort.Strings(out)
	return out
}

// remove removes node from the cluster on master m.
func (x *run) remove(ctx context.Context, m install.Executor, st install.ClusterState, node string) error {
	if err := x.mayRemove(st, node); err != nil {
		return err
	}
	what := "node " + node
	if len(st.Named(node)) > 0 {
		what = "master " + node
	}
	x.removalCondition(ctx, ReasonRemoving, "removing "+what+": no host of the Provisioning names it")
	x.r.event(ref(x.p), false, ReasonRemoving, "Remove", fmt.Sprintf("removing %s from cluster %s: no host of the Provisioning names it", what, x.cl.Name))
	ctx, cancel := context.WithTimeout(ctx, PhaseDeadlines[removal])
	defer cancel()
	if _, ok := st.Nodes[node]; ok {
		if _, err := m.Run(ctx, install.DrainJob(node, DrainTimeout)); err != nil {
			ctrl.LoggerFrom(ctx).Info("drain did not finish; removing the node anyway", "node", node, "error", err.Error())
			x.r.event(ref(x.p), true, ReasonDrainFailed, "Remove", install.Redact(fmt.Sprintf("draining node %s did not finish (%v): removing it anyway", node, err)))
		}
	}
	if err := x.forget(ctx, m, node, removal, st); err != nil {
		return err
	}
	ctrl.LoggerFrom(ctx).Info("node removed", "node", node)
	x.r.event(ref(x.p), false, ReasonRemoved, "Remove", fmt.Sprintf("removed %s from cluster %s", what, x.cl.Name))
	return nil
}

// mayRemove refuses to remove master node when its address is the
// cluster's API endpoint (kubeadm init made it the controlPlaneEndpoint,
// which every node's kubelet uses), or when no master of the Provisioning
// would be left a started etcd member.
func (x *run) mayRemove(st install.ClusterState, node string) error {
	if len(st.Named(node)) == 0 {
		return nil // a worker
	}
	if n, ok := st.Nodes[node]; ok && n.Address != "" && n.Address == st.Endpoint {
		return &refusal{ReasonEndpointMaster, fmt.Sprintf("not removing master %s, which no host of the Provisioning names: its address %s is the cluster's API endpoint "+
			"(kubeadm init made it the controlPlaneEndpoint), which every node's kubelet uses, and removing it would cut them all off. "+
			"Name %s in the Provisioning again", node, n.Address, node)}
	}
	for _, mem := range st.Members {
		if h := x.host(mem.Name); mem.Name != node && mem.Started && h != nil && h.Role == RoleMaster {
			return nil
		}
	}
	return &refusal{ReasonLastMaster, fmt.Sprintf("not removing master %s, which no host of the Provisioning names: "+
		"no master of the Provisioning is a started etcd member beside it, so it is the cluster's last master", node)}
}

// removalCondition records a removal's state in condition NodesRemoved
// and writes the status.
func (x *run) removalCondition(ctx context.Context, reason, msg string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.setCondition(ConditionNodesRemoved, metav1.ConditionFalse, reason, msg)
	if err := x.save(ctx); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "recording a removal", "reason", reason)
	}
}
