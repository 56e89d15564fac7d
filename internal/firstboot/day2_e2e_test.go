//go:build e2e

package firstboot

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	bpacontroller "github.com/bootstick/bootstick/internal/bpa/controller"
	bpa "github.com/bootstick/bootstick/internal/bpa/v1alpha1"
	"github.com/bootstick/bootstick/internal/command"
	"github.com/bootstick/bootstick/internal/vsite"
)

// node1Machine is the worker day 2 adds to node-0's cluster: UEFI
// firmware booting through its own PXE, a Redfish BMC, DHCP, one vCPU.
func node1Machine(t *testing.T) vsite.Machine {
	return vsite.Machine{Name: "node-1", MAC: "52:54:00:b0:07:21", BMC: vsite.BMCRedfish, BMCPort: 8444,
		BMCUser: "admin", BMCPassword: "bmc-" + randomHex(t, 6), Firmware: vsite.FirmwareUEFI}
}

// appCluster is an application cluster as its operator reaches it:
// kubectl with the kubeconfig from its Secret.
type appCluster struct {
	ctx     context.Context
	kubectl string // the toolchain's
	appConf string // the cluster's admin kubeconfig
	// etcdNode is the master whose etcd Pod etcdctl runs in.
	etcdNode string
}

// run runs kubectl on the application cluster.
func (a *appCluster) run(args ...string) ([]byte, error) {
	return exec.CommandContext(a.ctx, a.kubectl, append([]string{"--kubeconfig", a.appConf}, args...)...).CombinedOutput()
}

// day2 is the operator's day 2 on node-0's cluster, through its own
// commands: firstboot site apply and kubectl.
type day2 struct {
	*appCluster
	n     *node0
	node1 vsite.Machine
	ip1   string // node-1's address from DHCP
}

// siteApply runs firstboot site apply with the site at path, following
// the hosts as the operator's command does, and returns what it printed
// and how long it took.
func (d *day2) siteApply(t *testing.T, path string) (string, time.Duration) {
	t.Helper()
	start := time.Now()
	out, err := d.n.h.cmd("site", "apply", "--site", path, "--bundle", d.n.iso, "--data", d.n.h.data).CombinedOutput()
	took := time.Since(start).Round(time.Second)
	if err != nil {
		t.Fatalf("firstboot site apply --site %s: %v\n%s", path, err, command.Tail(string(out), 40))
	}
	t.Logf("firstboot site apply (%s):\n%s", took, command.Tail(string(out), 30))
	return string(out), took
}

// hosts are the application cluster's hosts the test looks into.
func (d *day2) hosts() []appHost {
	hs := []appHost{{"node-0", d.n.hostIP}}
	if d.ip1 != "" {
		hs = append(hs, appHost{"node-1", d.ip1})
	}
	return hs
}

// waitHostReady waits until the Provisioning shows name a Ready node of
// this provisioning (its BareMetalHost provisioned after since), and
// returns its status.
func (d *day2) waitHostReady(t *testing.T, name string, since time.Time) bpa.HostStatus {
	t.Helper()
	p := waitProvisioning(t, d.ctx, d.n.kubectl, node0Cluster, d.n.h.data, d.hosts(), name+" a Ready node", func(p *bpa.Provisioning) bool {
		h := hostStatus(p, name)
		return h != nil && h.State == bpa.HostReady && h.Error == "" && h.ProvisionedAt != nil && h.ProvisionedAt.After(since)
	})
	return *hostStatus(p, name)
}

// clusterView is the application cluster as the operator looks at it
// after each change: its Nodes and etcd's members.
type clusterView struct {
	nodes   map[string]nodeView
	members []string // etcd's members by name, sorted
}

type nodeView struct {
	uid          string
	ready        bool
	controlPlane bool
}

// view reads the cluster (kubectl get nodes; etcdctl member list) and
// logs both as the operator sees them.
func (a *appCluster) view(t *testing.T, when string) clusterView {
	t.Helper()
	wide, _ := a.run("get", "nodes", "-o", "wide")
	out, err := a.run("get", "nodes", "-o", "json")
	if err != nil {
		t.Fatalf("kubectl get nodes: %v\n%s", err, out)
	}
	var list struct {
		Items []struct {
			Metadata struct {
				Name, UID string
				Labels    map[string]string
			}
			Status struct {
				Conditions []struct{ Type, Status string }
			}
		}
	}
	if err := json.Unmarshal(out, &list); err != nil {
		t.Fatalf("kubectl get nodes: %v", err)
	}
	v := clusterView{nodes: map[string]nodeView{}}
	for _, it := range list.Items {
		nv := nodeView{uid: it.Metadata.UID}
		_, nv.controlPlane = it.Metadata.Labels["node-role.kubernetes.io/control-plane"]
		for _, c := range it.Status.Conditions {
			nv.ready = nv.ready || (c.Type == "Ready" && c.Status == "True")
		}
		v.nodes[it.Metadata.Name] = nv
	}
	members := string(a.etcdctl(t, "member", "list"))
	for _, line := range strings.Split(strings.TrimSpace(members), "\n") {
		if f := strings.Split(line, ", "); len(f) >= 3 {
			v.members = append(v.members, f[2])
		}
	}
	sort.Strings(v.members)
	t.Logf("%s: kubectl get nodes -o wide:\n%s\netcdctl member list:\n%s", when, wide, members)
	return v
}

// etcdctl runs etcdctl in the etcd Pod of a.etcdNode with the server's
// own certificate, and returns its output. Its own deadlines (5 s) are
// short for a control plane under TCG: it gets a minute, and a failed
// command is tried again for 5 minutes.
func (a *appCluster) etcdctl(t *testing.T, args ...string) []byte {
	t.Helper()
	var out []byte
	waitFor(t, a.ctx, 5*time.Minute, "etcdctl "+strings.Join(args, " ")+" in etcd-"+a.etcdNode, func() (bool, string) {
		var stderr bytes.Buffer
		cmd := exec.CommandContext(a.ctx, a.kubectl, append([]string{"--kubeconfig", a.appConf, "-n", "kube-system", "exec", "etcd-" + a.etcdNode, "--",
			"etcdctl", "--endpoints=https://127.0.0.1:2379", "--dial-timeout=30s", "--command-timeout=60s", "--cacert=/etc/kubernetes/pki/etcd/ca.crt",
			"--cert=/etc/kubernetes/pki/etcd/server.crt", "--key=/etc/kubernetes/pki/etcd/server.key"}, args...)...)
		cmd.Stderr = &stderr
		var err error
		out, err = cmd.Output()
		return err == nil && len(out) > 0, fmt.Sprintf("%v: %s", err, command.Tail(stderr.String(), 5))
	})
	return out
}

// want fails unless the cluster holds these Ready nodes (the masters
// first) and nothing else, and etcd these members.
func (v clusterView) want(t *testing.T, when string, masters, workers []string) {
	t.Helper()
	var got []string
	for name := range v.nodes {
		got = append(got, name)
	}
	sort.Strings(got)
	if all := slices.Sorted(slices.Values(slices.Concat(masters, workers))); !slices.Equal(got, all) {
		t.Errorf("%s: the cluster's nodes are %v, want %v", when, got, all)
	}
	for _, name := range masters {
		if nv := v.nodes[name]; !nv.ready || !nv.controlPlane {
			t.Errorf("%s: %s is %+v, want a Ready control-plane node", when, name, nv)
		}
	}
	for _, name := range workers {
		if nv := v.nodes[name]; !nv.ready || nv.controlPlane {
			t.Errorf("%s: %s is %+v, want a Ready worker", when, name, nv)
		}
	}
	if !slices.Equal(v.members, masters) {
		t.Errorf("%s: etcd's members are %v, want %v (the masters)", when, v.members, masters)
	}
}

// spreadManifest is a Deployment of one pod per node: a web server that
// serves its own files, which its pod on the other node reads over the
// pod network.
const spreadManifest = `apiVersion: apps/v1
kind: Deployment
metadata: {name: spread, namespace: default}
spec:
  replicas: 2
  selector: {matchLabels: {app: spread}}
  template:
    metadata: {labels: {app: spread}}
    spec:
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: spread}}}
      containers:
      - {name: web, image: registry.bootstick.dev/toolbox:1.35.0, args: [httpd, -f, -p, "8080", -h, /]}
`

type spreadPod struct{ name, node, ip, phase string }

// spreadPods are the Deployment spread's pods, by node ("" for none).
func (d *day2) spreadPods() (map[string]spreadPod, error) {
	out, err := d.run("get", "pods", "-l", "app=spread", "-o",
		`jsonpath={range .items[*]}{.metadata.name} {.spec.nodeName} {.status.podIP} {.status.phase}{"\n"}{end}`)
	if err != nil {
		return nil, fmt.Errorf("%v: %s", err, out)
	}
	pods := map[string]spreadPod{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Split(line, " "); len(f) == 4 {
			pods[f[1]] = spreadPod{f[0], f[1], f[2], f[3]}
		}
	}
	return pods, nil
}

// checkSpread waits until spread runs a pod on node-0 and one on node-1,
// and each reads the other's /etc/hostname over the pod network (node-1's
// flannel and CNI plugins, VXLAN between the nodes): the other pod's name.
func (d *day2) checkSpread(t *testing.T, when string) {
	t.Helper()
	var pods map[string]spreadPod
	waitFor(t, d.ctx, 15*time.Minute, "the Deployment spread Running on node-0 and node-1", func() (bool, string) {
		var err error
		pods, err = d.spreadPods()
		return err == nil && pods["node-0"].phase == "Running" && pods["node-1"].phase == "Running", fmt.Sprint(pods, err)
	})
	for _, from := range []string{"node-0", "node-1"} {
		to := pods["node-1"]
		if from == "node-1" {
			to = pods["node-0"]
		}
		out, err := d.run("exec", pods[from].name, "--", "wget", "-q", "-T", "20", "-O", "-", "http://"+to.ip+":8080/etc/hostname")
		if err != nil || strings.TrimSpace(string(out)) != to.name {
			t.Errorf("%s: the pod on %s read %q (%v) from the pod on %s (%s), want its name %s", when, from, out, err, to.node, to.ip, to.name)
		} else {
			t.Logf("%s: the pod on %s reads the name of the pod on %s at %s over the pod network", when, from, to.node, to.ip)
		}
	}
}

// bmhState is a BareMetalHost's provisioning state ("" when it is gone).
func (d *day2) bmhState(name string) (string, error) {
	out, err := exec.CommandContext(d.ctx, d.n.kubectl, "--kubeconfig", adminConf, "-n", "metal3", "get", "bmh", name,
		"--ignore-not-found", "-o", "jsonpath={.status.provisioning.state}").CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// events logs the Provisioning's Events of one reason, with their times,
// and returns their messages.
func (d *day2) events(t *testing.T, reasons ...string) []string {
	t.Helper()
	out, err := exec.CommandContext(d.ctx, d.n.kubectl, "--kubeconfig", adminConf, "-n", "metal3", "get", "events",
		"--field-selector", "involvedObject.kind=Provisioning,involvedObject.name="+node0Cluster, "-o", "json").Output()
	if err != nil {
		t.Errorf("the Provisioning's Events: %v", err)
		return nil
	}
	var list struct {
		Items []struct {
			Reason, Message, Type string
			LastTimestamp         time.Time
			EventTime             time.Time
		}
	}
	if err := json.Unmarshal(out, &list); err != nil {
		t.Errorf("the Provisioning's Events: %v", err)
		return nil
	}
	var msgs []string
	var b strings.Builder
	for _, e := range list.Items {
		if slices.Contains(reasons, e.Reason) {
			when := e.LastTimestamp
			if when.IsZero() {
				when = e.EventTime
			}
			fmt.Fprintf(&b, "  %s %-7s %-14s %s\n", when.Format(time.TimeOnly), e.Type, e.Reason, e.Message)
			msgs = append(msgs, e.Message)
		}
	}
	t.Logf("the Provisioning's Events (%s):\n%s", strings.Join(reasons, ", "), b.String())
	return msgs
}

// addHost: a site naming node-1 as a worker, applied with firstboot site
// apply, provisions it, and the BPA joins it to the cluster.
func (d *day2) addHost(t *testing.T) {
	start := time.Now()
	out, took := d.siteApply(t, d.n.siteWith(t, vsite.SiteHost{Machine: "node-0"}, vsite.SiteHost{Machine: "node-1", Role: "worker"}))
	for _, want := range []string{"added:   node-1\n", "kept:    node-0\n", "removed: none\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("site apply's output lacks %q", want)
		}
	}
	d.ip1 = inspectedAddress(t, d.ctx, d.n.kubectl, "node-1", d.node1.MAC)
	t.Logf("AddHost: site apply, to node-1 provisioned: %s; node-1's address from DHCP: %s", took, d.ip1)
	h := d.waitHostReady(t, "node-1", start)
	phaseTable(t, h, bpa.PhaseJoin)
	t.Logf("AddHost: site apply to node-1 a Ready node: %s", time.Since(start).Round(time.Second))
	d.view(t, "AddHost").want(t, "AddHost", []string{"node-0"}, []string{"node-1"})
	apply := exec.CommandContext(d.ctx, d.kubectl, "--kubeconfig", d.appConf, "apply", "-f", "-")
	apply.Stdin = strings.NewReader(spreadManifest)
	if out, err := apply.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply the Deployment spread: %v\n%s", err, out)
	}
	d.checkSpread(t, "AddHost")
}

// reprovision: node-1's OS is written again, as Metal3 does it (its
// image taken away: the baremetal-operator deprovisions it; then given
// back by site apply), and the BPA cleans its old Node from the cluster
// before it joins again.
func (d *day2) reprovision(t *testing.T) {
	old := d.view(t, "Reprovision, before").nodes["node-1"]
	start := time.Now()
	if out, err := exec.CommandContext(d.ctx, d.n.kubectl, "--kubeconfig", adminConf, "-n", "metal3", "patch", "bmh", "node-1",
		"--type", "json", "-p", `[{"op":"remove","path":"/spec/image"}]`).CombinedOutput(); err != nil {
		t.Fatalf("kubectl patch bmh node-1 (its image removed): %v\n%s", err, out)
	}
	waitFor(t, d.ctx, 30*time.Minute, "node-1 deprovisioned (available)", func() (bool, string) {
		s, err := d.bmhState("node-1")
		return err == nil && s == "available", fmt.Sprint(s, err)
	})
	t.Logf("Reprovision: node-1 deprovisioned in %s", time.Since(start).Round(time.Second))
	out, took := d.siteApply(t, d.n.siteWith(t, vsite.SiteHost{Machine: "node-0"}, vsite.SiteHost{Machine: "node-1", Role: "worker"}))
	if !strings.Contains(out, "kept:    node-0, node-1\n") {
		t.Errorf("site apply's output lacks %q", "kept:    node-0, node-1")
	}
	t.Logf("Reprovision: site apply, to node-1 provisioned again: %s", took)
	d.ip1 = inspectedAddress(t, d.ctx, d.n.kubectl, "node-1", d.node1.MAC)
	h := d.waitHostReady(t, "node-1", start)
	phaseTable(t, h, bpa.PhaseCleanup, bpa.PhaseJoin)
	t.Logf("Reprovision: image removed to node-1 a Ready node again: %s", time.Since(start).Round(time.Second))
	v := d.view(t, "Reprovision")
	v.want(t, "Reprovision", []string{"node-0"}, []string{"node-1"})
	if v.nodes["node-1"].uid == old.uid {
		t.Errorf("Reprovision: node-1's Node is the one from before (uid %s), want the old one deleted and a new one", old.uid)
	}
	d.checkSpread(t, "Reprovision")
}

// removeHost: a site without node-1, applied, deprovisions its
// BareMetalHost, and the BPA drains its node and deletes it.
func (d *day2) removeHost(t *testing.T) {
	start := time.Now()
	out, took := d.siteApply(t, d.n.siteWith(t, vsite.SiteHost{Machine: "node-0"}))
	if !strings.Contains(out, "removed: node-1 ") || !strings.Contains(out, "kept:    node-0\n") {
		t.Errorf("site apply's output names no removal of node-1")
	}
	t.Logf("RemoveHost: site apply, to node-1's BareMetalHost gone: %s", took)
	waitProvisioning(t, d.ctx, d.n.kubectl, node0Cluster, d.n.h.data, d.hosts()[:1], "node-1 removed from the cluster", func(p *bpa.Provisioning) bool {
		c := meta.FindStatusCondition(p.Status.Conditions, bpacontroller.ConditionNodesRemoved)
		return hostStatus(p, "node-1") == nil && c != nil && c.Status == "True"
	})
	t.Logf("RemoveHost: site apply to node-1 removed from the cluster: %s", time.Since(start).Round(time.Second))
	d.view(t, "RemoveHost").want(t, "RemoveHost", []string{"node-0"}, nil)
	if s, err := d.bmhState("node-1"); err != nil || s != "" {
		t.Errorf("RemoveHost: node-1's BareMetalHost is still there (%q, %v)", s, err)
	}
	msgs := d.events(t, bpacontroller.ReasonRemoving, bpacontroller.ReasonRemoved, bpacontroller.ReasonDrainFailed, bpacontroller.ReasonRemovalFailed)
	if !slices.Contains(msgs, "removed node node-1 from cluster "+node0Cluster) {
		t.Errorf("RemoveHost: no Event says node-1 was removed")
	}
	// What ran on node-1 is gone from it; what ran on node-0 runs on.
	pods, err := d.spreadPods()
	if err != nil || pods["node-0"].phase != "Running" || pods["node-1"].name != "" {
		t.Errorf("RemoveHost: the Deployment spread's pods are %v (%v), want one Running on node-0 and none on node-1", pods, err)
	}
}
