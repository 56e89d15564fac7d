package install

import (
	"context"
	"strings"
	"testing"
)

// answer is a Querier that prints out whatever it is asked.
type answer string

func (a answer) Query(context.Context, string, string, ...string) ([]byte, error) {
	return []byte(a), nil
}

// TestJoinMissingReadsTheCluster: a join counts as done only with the
// node Ready and, for a master, its etcd Pod Ready and a member of its
// name in etcd's list that has started (client URLs) and votes; an
// unreadable member list is missing too. The member lists have the shape
// etcd 3.6.5's gateway answers POST /v3/cluster/member/list with (read
// from the toolchain's etcd): a member added by a join but not started
// has no name and no client URLs, and a learner says "isLearner":true.
func TestJoinMissingReadsTheCluster(t *testing.T) {
	const started = `{"header":{},"members":[{"ID":"1","name":"m0","clientURLs":["https://10.0.0.1:2379"]},{"ID":"2","name":"m1","clientURLs":["https://10.0.0.2:2379"]}]}`
	for _, c := range []struct {
		name, out string
		master    bool
		want      string // "" when nothing is missing; else a missing item
	}{
		{"worker ready", "node-ready=True\n", false, ""},
		{"worker not ready", "node-ready=False\n", false, "node m1 is not Ready (Ready=False)"},
		{"worker unknown", "node-ready=\n", false, "node m1 is not Ready (Ready=none)"},
		{"master done", "node-ready=True\netcd-pod-ready=True\netcd-members=" + started + "\n", true, ""},
		{"member added, not started", "node-ready=True\netcd-pod-ready=True\netcd-members=" +
			`{"members":[{"ID":"1","name":"m0","clientURLs":["https://10.0.0.1:2379"]},{"ID":"2","peerURLs":["https://10.0.0.2:2380"],"isLearner":true}]}` + "\n", true, "etcd lists no started member m1"},
		{"member a learner", "node-ready=True\netcd-pod-ready=True\netcd-members=" +
			`{"members":[{"ID":"2","name":"m1","clientURLs":["https://10.0.0.2:2379"],"isLearner":true}]}` + "\n", true, "etcd member m1 is still a learner"},
		{"etcd pod not ready", "node-ready=True\netcd-pod-ready=False\netcd-members=" + started + "\n", true, "Pod etcd-m1 is not Ready"},
		{"etcd unreadable", "node-ready=True\netcd-pod-ready=True\netcd-members=\n", true, "member list could not be read"},
	} {
		missing, err := JoinMissing(context.Background(), answer(c.out), "m1", c.master)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got := strings.Join(missing, "; ")
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%s: missing %q, want %q", c.name, got, c.want)
		}
	}
	if s := joinStateScript("m1", true); !strings.Contains(s, "get pod 'etcd-m1'") || !strings.Contains(s, "/v3/cluster/member/list") {
		t.Errorf("the master's join check asks neither its etcd Pod nor etcd's members:\n%s", s)
	}
	bashSyntax(t, "join state", joinStateScript("m1", true))
}

// TestInitMissingReadsTheCluster: an init is done when its check prints
// nothing; each line it prints is a thing missing. The check asks for
// the addons and the bootstrap RBAC by name.
func TestInitMissingReadsTheCluster(t *testing.T) {
	if m, err := InitMissing(context.Background(), answer("")); err != nil || len(m) != 0 {
		t.Errorf("a made cluster: missing %v, %v", m, err)
	}
	m, err := InitMissing(context.Background(), answer("no CoreDNS Deployment\nno bootstrap-token RBAC\n"))
	if err != nil || len(m) != 2 {
		t.Errorf("two things missing: %v, %v", m, err)
	}
	for _, want := range []string{"deployment coredns", "daemonset kube-proxy", "clusterrolebinding kubeadm:kubelet-bootstrap kubeadm:get-nodes", "get --raw /readyz", "configmap cluster-info"} {
		if !strings.Contains(initStateScript, want) {
			t.Errorf("the init check does not ask for %q", want)
		}
	}
	bashSyntax(t, "init state", initStateScript)
}
