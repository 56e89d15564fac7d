//go:build e2e

package firstboot

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	sigsyaml "sigs.k8s.io/yaml"

	bpa "github.com/bootstick/bootstick/internal/bpa/v1alpha1"
	"github.com/bootstick/bootstick/internal/command"
	"github.com/bootstick/bootstick/internal/kube"
	"github.com/bootstick/bootstick/internal/kubeadm"
)

// TestAppClusterDHCPClock is the application cluster in host mode, the
// whole of TestProvisionDHCPClock's journey (make test runs that half):
// node-0 (see node0) is provisioned, and the BPA installs it over SSH at
// its address from DHCP, with the host key firstboot gave it: the packages
// from the stick's web server, the images from the stick's registry,
// kubeadm init, and flannel. The BPA is killed during the install and
// carries on. The operator then gets the kubeconfig with kubectl, and the
// node is Ready at the control plane's VIP with every pod Running from
// images the stick served, by digest; the node, a master with no worker
// beside it, has no taint and runs an ordinary Deployment; etcd holds its
// Secrets encrypted. node-0's OS, its clock, the firewall and DHCP are
// checked as in TestProvisionDHCPClock, and no secret (the kubeconfig's
// key among them) reaches a log, the status or an event. Under TCG on
// this machine it takes 35 to 45 minutes, so it is make e2e's.
func TestAppClusterDHCPClock(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the stick, provisions a QEMU machine through virtualbmc and installs Kubernetes on it (root, make toolchain)")
	}
	node1 := node1Machine(t)
	n, ctx := provisionNode0(t, 190*time.Minute, node1)
	kubectl, hostIP, h := n.kubectl, n.hostIP, n.h
	const cluster, vip = node0Cluster, node0VIP

	killed := n.killBPAInInstall(t, ctx)

	p := waitClusterReady(t, ctx, kubectl, cluster, h.data, []appHost{{"node-0", hostIP}})
	n0 := p.Status.Hosts[0]
	if n0.State != bpa.HostReady || n0.Error != "" {
		t.Errorf("node-0: %s", describe(p))
	}
	phaseTable(t, n0, bpa.PhaseInit)
	checkInstallRanAgain(t, n0, killed)

	// The operator's two commands.
	appConf, appConfPath := operatorKubeconfig(t, ctx, kubectl, cluster)
	nodes, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", appConfPath, "get", "nodes", "-o", "wide").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl --kubeconfig app.conf get nodes: %v\n%s", err, nodes)
	}
	t.Logf("kubectl --kubeconfig app.conf get nodes -o wide:\n%s", nodes)
	// The operator's kubeconfig, and so every kubectl above, reaches the
	// API at the VIP.
	if server, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", appConfPath, "config", "view", "-o", "jsonpath={.clusters[0].cluster.server}").Output(); err != nil ||
		string(server) != "https://"+vip+":6443" {
		t.Errorf("app.conf's server is %q (%v), want https://%s:6443, the control plane's VIP", server, err, vip)
	}
	// Its controllers ride out a slow API server as the appliance's do.
	if ac, err := kube.Load(appConfPath); err != nil {
		t.Errorf("app.conf: %v", err)
	} else {
		checkLeaderElection(t, ctx, ac.CS, "kube-system/kube-controller-manager", "kube-system/kube-scheduler")
	}
	// etcd and the API server ride out a stall of the host's CPU: the
	// kubelet restarts them only after kubeadm.StallFailureThreshold
	// failed liveness probes (the BPA's patches to kubeadm's static Pods).
	for _, pod := range []string{"etcd-node-0", "kube-apiserver-node-0"} {
		got, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", appConfPath, "-n", "kube-system", "get", "pod", pod,
			"-o", "jsonpath={.spec.containers[0].livenessProbe.failureThreshold}").CombinedOutput()
		if err != nil || string(got) != strconv.Itoa(kubeadm.StallFailureThreshold) {
			t.Errorf("%s's liveness probe fails after %q failures (%v), want %d", pod, got, err, kubeadm.StallFailureThreshold)
		}
	}
	// ... and the kubelet asks the API server's /readyz every
	// kubeadm.ReadinessPeriodSeconds, not every second.
	if got, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", appConfPath, "-n", "kube-system", "get", "pod", "kube-apiserver-node-0",
		"-o", "jsonpath={.spec.containers[0].readinessProbe.periodSeconds}").CombinedOutput(); err != nil || string(got) != strconv.Itoa(kubeadm.ReadinessPeriodSeconds) {
		t.Errorf("kube-apiserver-node-0's readiness probe runs every %q s (%v), want %d", got, err, kubeadm.ReadinessPeriodSeconds)
	}
	// ... and its /livez waits kubeadm.APIServerEtcdCheckTimeout for etcd.
	if got, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", appConfPath, "-n", "kube-system", "get", "pod", "kube-apiserver-node-0",
		"-o", "jsonpath={.spec.containers[0].command}").CombinedOutput(); err != nil ||
		!strings.Contains(string(got), `"--etcd-healthcheck-timeout=`+kubeadm.APIServerEtcdCheckTimeout.String()+`"`) {
		t.Errorf("kube-apiserver-node-0 does not wait %s for etcd's health (%v): %s", kubeadm.APIServerEtcdCheckTimeout, err, got)
	}
	if !strings.Contains(string(nodes), "node-0") || !strings.Contains(string(nodes), " Ready ") {
		t.Errorf("node-0 is not Ready")
	}
	// Its own OS kept the ramdisk's address, and DHCP gave it the
	// bootstrap machine as its router: the node's InternalIP is the address
	// the BPA reached it at.
	internal, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", appConfPath, "get", "node", "node-0", "-o",
		`jsonpath={.status.addresses[?(@.type=="InternalIP")].address}`).Output()
	if err != nil || strings.TrimSpace(string(internal)) != hostIP {
		t.Errorf("node-0's InternalIP is %q (%v), want %s, the address it had from DHCP during inspection", internal, err, hostIP)
	}
	n.checkOS(t)
	if c, err := sshDial(h.data, "node-0", hostIP); err != nil {
		t.Errorf("SSH to node-0 at %s: %v", hostIP, err)
	} else {
		ka, kerr := sshOutput(c, "systemctl is-active keepalived; ip -4 -o addr show to "+vip)
		// Where kubeadm init's minutes went under TCG (its own clocks).
		if took, err := sshOutput(c, "grep -E 'healthy after|Pulled|pulled' /var/log/bootstick-kubeadm-init.log"); err == nil {
			t.Logf("node-0's kubeadm init:\n%s", took)
		}
		c.Close()
		if kerr != nil || !strings.HasPrefix(ka, "active\n") || !strings.Contains(ka, " "+vip+"/24 ") {
			t.Errorf("node-0's keepalived does not hold the VIP %s/24 (%v):\n%s", vip, kerr, ka)
		} else {
			t.Logf("node-0's keepalived and the VIP:\n%s", ka)
		}
	}
	var pods struct {
		Items []struct {
			Metadata struct{ Namespace, Name string }
			Spec     struct{ Containers []struct{ Image string } }
			Status   struct {
				Phase      string
				Conditions []struct{ Type, Status string }
			}
		}
	}
	var images map[string]bool
	waitFor(t, ctx, 25*time.Minute, "every pod of the application cluster Running and ready", func() (bool, string) {
		out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", appConfPath, "get", "pods", "-A", "-o", "json").Output()
		if err != nil || json.Unmarshal(out, &pods) != nil {
			return false, fmt.Sprint(err)
		}
		images = map[string]bool{}
		var notRunning []string
		for _, p := range pods.Items {
			ready := false
			for _, c := range p.Status.Conditions {
				ready = ready || (c.Type == "Ready" && c.Status == "True")
			}
			if p.Status.Phase != "Running" || !ready {
				notRunning = append(notRunning, fmt.Sprintf("%s/%s %s ready=%v", p.Metadata.Namespace, p.Metadata.Name, p.Status.Phase, ready))
			}
			for _, c := range p.Spec.Containers {
				images[c.Image] = true
			}
		}
		return len(pods.Items) >= 7 && len(notRunning) == 0, fmt.Sprintf("%d pods; not running: %v", len(pods.Items), notRunning)
	})
	listing, _ := exec.CommandContext(ctx, kubectl, "--kubeconfig", appConfPath, "get", "pods", "-A", "-o", "wide").CombinedOutput()
	t.Logf("kubectl --kubeconfig app.conf get pods -A:\n%s", listing)

	// flanneld took the interface that holds the node's InternalIP.
	flannel, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", appConfPath, "-n", "kube-flannel", "logs", "ds/kube-flannel-ds").CombinedOutput()
	if err != nil || !strings.Contains(string(flannel), " and address "+hostIP+"\n") {
		t.Errorf("flanneld on node-0 does not use the interface with %s (%v):\n%s", hostIP, err, command.Tail(string(flannel), 20))
	}

	// The application cluster encrypts Secrets at rest: etcd holds a new
	// Secret as secretbox ciphertext under the BPA's key, never its value.
	value := "at-rest-" + randomHex(t, 8)
	if out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", appConfPath, "create", "secret", "generic", "at-rest", "--from-literal=v="+value).CombinedOutput(); err != nil {
		t.Errorf("creating a Secret in the application cluster: %v\n%s", err, out)
	}
	app := &appCluster{ctx: ctx, kubectl: kubectl, appConf: appConfPath, etcdNode: "node-0"}
	raw := app.etcdctl(t, "get", "/registry/secrets/default/at-rest")
	if !bytes.Contains(raw, []byte("\nk8s:enc:secretbox:v1:bootstick-1:")) || bytes.Contains(raw, []byte(value)) {
		t.Errorf("etcd holds the application cluster's Secret as %q, want secretbox ciphertext under key bootstick-1, without its value", command.Tail(string(raw), 3))
	} else {
		t.Logf("etcd holds the application cluster's Secret encrypted: %q...", raw[:min(len(raw), 80)])
	}

	checkPulledByDigest(t, ctx, kubectl, h.data, hostIP, images)

	// A cluster of one master and no worker runs workloads: the master has
	// no taint, and an ordinary Deployment (no toleration, no node name)
	// runs on it.
	t.Run("MastersOnly", func(t *testing.T) {
		if taints, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", appConfPath, "get", "node", "node-0", "-o", "jsonpath={.spec.taints}").CombinedOutput(); err != nil || len(taints) != 0 {
			t.Errorf("node-0, the only master of a cluster with no worker, has taints (%v): %s", err, taints)
		}
		web := exec.CommandContext(ctx, kubectl, "--kubeconfig", appConfPath, "apply", "-f", "-")
		web.Stdin = strings.NewReader(`apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - {name: web, image: registry.bootstick.dev/toolbox:1.35.0, args: [httpd, -f, -p, "8080", -h, /]}
`)
		if out, err := web.CombinedOutput(); err != nil {
			t.Fatalf("kubectl apply the Deployment web: %v\n%s", err, out)
		}
		waitFor(t, ctx, 10*time.Minute, "the Deployment web's two pods Running on node-0", func() (bool, string) {
			out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", appConfPath, "get", "pods", "-l", "app=web",
				"-o", `jsonpath={range .items[*]}{.spec.nodeName} {.status.phase}{"\n"}{end}`).CombinedOutput()
			return err == nil && string(out) == "node-0 Running\nnode-0 Running\n", string(out)
		})
		t.Log("the Deployment web (no toleration) runs two pods on node-0, the cluster's only node, a master")
	})

	// No secret in the BPA's log, firstboot's log, the status or events:
	// the kubeconfig's key neither.
	var kc struct {
		Users []struct {
			User struct {
				Key string `json:"client-key-data"`
			}
		}
	}
	if err := sigsyaml.Unmarshal(appConf, &kc); err != nil || len(kc.Users) == 0 || kc.Users[0].User.Key == "" {
		t.Fatalf("the kubeconfig has no client key: %v", err)
	}
	n.checkNoSecret(t, ctx, p, map[string]string{"the kubeconfig's client key": kc.Users[0].User.Key})
	n.checkDHCP(t, ctx)

	// Day 2, with the operator's commands: a worker added, its OS written
	// again, and the worker removed, each applied with firstboot site
	// apply; after each, the nodes and etcd's members are what the site
	// says.
	d := &day2{appCluster: app, n: n, node1: node1}
	for _, step := range []struct {
		name string
		run  func(*testing.T)
	}{{"AddHost", d.addHost}, {"Reprovision", d.reprovision}, {"RemoveHost", d.removeHost}} {
		if !t.Run(step.name, step.run) {
			return
		}
	}
	if p, err = n.provisioning(ctx); err != nil {
		t.Fatal(err)
	}
	n.checkNoSecret(t, ctx, p, map[string]string{"node-1's BMC password": node1.BMCPassword})
}
