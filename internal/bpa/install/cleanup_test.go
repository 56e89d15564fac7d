package install

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// asked is a Querier that keeps what it was asked and answers out.
type asked struct {
	what, script []string
	out          string
}

func (s *asked) Query(_ context.Context, what, script string, _ ...string) ([]byte, error) {
	s.what, s.script = append(s.what, what), append(s.script, script)
	return []byte(s.out), nil
}

// runClusterState runs the cluster-state script with bash as the BPA's
// SSH does, a kubectl printing nodes and a curl printing members (or
// failing with exit status curlExit) first on PATH.
func runClusterState(t *testing.T, nodes, members string, curlExit int) (string, error) {
	t.Helper()
	bin := t.TempDir()
	for name, body := range map[string]string{
		"kubectl": "#!/bin/sh\nprintf '%s' '" + nodes + "'\n",
		"curl":    "#!/bin/sh\nprintf '%s\\n' '" + members + "'\nexit " + string(rune('0'+curlExit)) + "\n",
	} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("bash", "-euo", "pipefail", "-s")
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
	cmd.Stdin = strings.NewReader(wholeScript(clusterStateScript))
	out, err := cmd.Output()
	return string(out), err
}

// TestReadClusterReadsTheCluster runs the cluster-state script against a
// kubectl and a curl that answer as the API server and etcd 3.6's
// gateway do (IDs as strings, a member added but not started nameless, a
// node whose Ready condition is not there yet), and parses its answer;
// the script fails when etcd does not answer, rather than print a
// cluster without members.
func TestReadClusterReadsTheCluster(t *testing.T) {
	const nodes = "m0 True 10.0.0.1\nw1  10.0.0.3\n"
	const members = `{"header":{"cluster_id":"1","member_id":"2","raft_term":"3"},"members":[` +
		`{"ID":"12345678901234567890","name":"m0","peerURLs":["https://10.0.0.1:2380"],"clientURLs":["https://10.0.0.1:2379"]},` +
		`{"ID":"42","peerURLs":["https://10.0.0.2:2380"],"isLearner":true}]}`
	out, err := runClusterState(t, nodes, members, 0)
	if err != nil {
		t.Fatalf("the script: %v\n%s", err, out)
	}
	st, err := ReadCluster(context.Background(), answer(out+"endpoint=https://10.0.0.1:6443\n"))
	if err != nil {
		t.Fatalf("ReadCluster: %v\n%s", err, out)
	}
	if n := st.Nodes["m0"]; len(st.Nodes) != 2 || !n.Ready || n.Address != "10.0.0.1" || st.Nodes["w1"].Ready || st.Nodes["w1"].Address != "10.0.0.3" {
		t.Errorf("nodes %+v, want m0 Ready at 10.0.0.1 and w1 not Ready at 10.0.0.3", st.Nodes)
	}
	want := []Member{{ID: "12345678901234567890", Name: "m0", Started: true}, {ID: "42", Learner: true}}
	if !slices.Equal(st.Members, want) || st.Endpoint != "10.0.0.1" {
		t.Errorf("members %+v, endpoint %q; want %+v, 10.0.0.1", st.Members, st.Endpoint, want)
	}
	if !st.Holds("m0") || st.Holds("m1") || st.Left("m0") != "Node m0, etcd member m0 (ID 12345678901234567890)" {
		t.Errorf("Holds/Left of m0: %v %q", st.Holds("m0"), st.Left("m0"))
	}
	if out, err := runClusterState(t, nodes, `{"error":"etcdserver: request timed out"}`, 7); err == nil {
		t.Errorf("etcd did not answer, yet the script ended well:\n%s", out)
	}
	if _, err := ReadCluster(context.Background(), answer(`etcd-members={"members":[{"ID":"1; rm -rf /","name":"m0"}]}`)); err == nil {
		t.Error("a member ID that is not a number was taken")
	}
}

// TestCleanupScripts: the deletes and the drain say what the README
// says, parse, and take only what they remove.
func TestCleanupScripts(t *testing.T) {
	ctx := context.Background()
	q := &asked{}
	if err := DeleteNode(ctx, q, "w1"); err != nil {
		t.Fatal(err)
	}
	if err := RemoveMember(ctx, q, Member{ID: "42", Name: "m1"}); err != nil {
		t.Fatal(err)
	}
	q.out = "join\n"
	if m, err := ReadMarks(ctx, q); err != nil || m.Init || !m.Join || !m.Any() {
		t.Errorf("marks of a joined host: %+v, %v", m, err)
	}
	for _, want := range []string{"delete node 'w1' --ignore-not-found", `-d '{"ID":"42"}' https://127.0.0.1:2379/v3/cluster/member/remove`, "kubeadm-$m.done"} {
		if !slices.ContainsFunc(q.script, func(s string) bool { return strings.Contains(s, want) }) {
			t.Errorf("no script holds %q:\n%s", want, strings.Join(q.script, "\n"))
		}
	}
	for i, s := range q.script {
		bashSyntax(t, q.what[i], s)
	}
	for _, c := range []struct {
		timeout  time.Duration
		flag     string
		deadline time.Duration
	}{{5 * time.Minute, "--timeout=300s", 6 * time.Minute}, {time.Millisecond, "--timeout=1s", time.Minute + time.Millisecond}} {
		j := DrainJob("w1", c.timeout)
		if j.Name != "drain-w1" || j.Deadline != c.deadline ||
			!strings.Contains(j.Script, "drain 'w1' --ignore-daemonsets --delete-emptydir-data --force "+c.flag) {
			t.Errorf("drain for %v: %q, deadline %v:\n%s", c.timeout, j.Name, j.Deadline, j.Script)
		}
		bashSyntax(t, j.Name, j.Script)
	}
	bashSyntax(t, "cluster state", clusterStateScript)
}
