//go:build e2e

package firstboot

import (
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bpa "github.com/bootstick/bootstick/internal/bpa/v1alpha1"
	"github.com/bootstick/bootstick/internal/command"
	"github.com/bootstick/bootstick/internal/testctx"
	"github.com/bootstick/bootstick/internal/vsite"
)

// TestAppClusterTwo is the application cluster of one master and one
// worker in host mode, from the real stick (make e2e): the BPA joins the
// worker through the master's bootstrap token, and a pod on the worker
// reaches a pod on the master over flannel.
func TestAppClusterTwo(t *testing.T) {
	tc := toolchainDir(t)
	iso := buildStickISO(t)
	h := newHostRun(t, tc)
	ctx, cancel := testctx.New(t, 100*time.Minute)
	defer cancel()
	machines := []vsite.Machine{
		{Name: "node-a", MAC: "52:54:00:b0:0a:10", BMCPort: 6230, BMCUser: "admin", BMCPassword: "bmc-" + randomHex(t, 6), CPUs: controlPlaneCPUs},
		{Name: "node-b", MAC: "52:54:00:b0:0a:11", BMCPort: 6231, BMCUser: "admin", BMCPassword: "bmc-" + randomHex(t, 6)},
	}
	vs := startSite(t, ctx, machines)
	const cluster = "edge-two"
	sitePath := writeSite(t, vs, vsite.SiteConfig{
		Cluster: cluster,
		Image:   vsite.SiteImage{Bundled: "debian-13-compute"},
		Hosts: []vsite.SiteHost{{Machine: "node-a", Address: netip.MustParseAddr("172.22.0.60")},
			{Machine: "node-b", Role: "worker", Address: netip.MustParseAddr("172.22.0.61")}},
	})
	if out, err := h.cmd("run", "--mode", "host", "--bundle", iso, "--data", h.data, "--site", sitePath).CombinedOutput(); err != nil {
		t.Fatalf("run: %v\n%s", err, command.Tail(string(out), 40))
	}
	kubectl := filepath.Join(tc, "bin", "kubectl")
	p := waitClusterReady(t, ctx, kubectl, cluster, h.data, []appHost{{"node-a", "172.22.0.60"}, {"node-b", "172.22.0.61"}})
	for _, hs := range p.Status.Hosts {
		made := bpa.PhaseJoin
		if hs.Name == "node-a" {
			made = bpa.PhaseInit
		}
		phaseTable(t, hs, made)
	}
	_, conf := operatorKubeconfig(t, ctx, kubectl, cluster)
	k := func(stdin string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", conf}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	t.Logf("get nodes:\n%s", k("", "get", "nodes", "-o", "wide"))

	// A web server on the master, a client on the worker: the stick's
	// Ironic image has python3 and curl.
	const image = "registry.bootstick.dev/ironic:29.0.5"
	k(`apiVersion: v1
kind: Pod
metadata: {name: server, namespace: default}
spec:
  nodeName: node-a
  tolerations: [{operator: Exists}]
  containers:
  - {name: server, image: `+image+`, command: [python3, -m, http.server, "8080"]}
---
apiVersion: v1
kind: Pod
metadata: {name: client, namespace: default}
spec:
  nodeName: node-b
  containers:
  - {name: client, image: `+image+`, command: [sleep, infinity]}
`, "apply", "-f", "-")
	k("", "wait", "--for=condition=Ready", "--timeout=20m", "pod/server", "pod/client")
	ip := strings.TrimSpace(k("", "get", "pod", "server", "-o", "jsonpath={.status.podIP}"))
	var out string
	waitFor(t, ctx, 5*time.Minute, "the worker's pod reaching the master's", func() (bool, string) {
		b, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", conf, "exec", "client", "--", "curl", "-sS", "-m", "10", "http://"+ip+":8080/").CombinedOutput()
		out = string(b)
		return err == nil && strings.Contains(out, "Directory listing"), out
	})
	t.Logf("a pod on node-b reached a pod on node-a (%s) across nodes over flannel:\n%s", ip, command.Tail(out, 3))
}
