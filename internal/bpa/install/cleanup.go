package install

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// What a master reads and does so that the cluster holds the hosts of
// its Provisioning and nothing else: a host provisioned again left its
// old Node and etcd member behind, and a host removed from the
// Provisioning is a node until the BPA removes it. The controller decides
// when (controller/cleanup.go); these are its reads and deletes, each
// idempotent, and the drain, a job with a deadline.

// What the queries are called; the fake answers by these.
const (
	whatClusterState = "reading the cluster's nodes and etcd members"
	whatMarks        = "reading the kubeadm marks"
	whatDeleteNode   = "deleting node "
	whatRemoveMember = "removing etcd member "
)

// JobDrain is the start of a drain job's name; the node's name follows.
const JobDrain = "drain-"

// Node is one Node of the cluster.
type Node struct {
	Ready bool
	// Address is its InternalIP: the address the BPA reached its host at.
	Address string
}

// ClusterState is the cluster as a master sees it.
type ClusterState struct {
	Nodes   map[string]Node
	Members []Member
	// Endpoint is the host of the API server address in the master's
	// admin.conf: the cluster's controlPlaneEndpoint, which every node's
	// kubelet and kubeadm use.
	Endpoint string
}

// clusterStateScript prints a line node=NAME READY ADDRESS per Node,
// etcd's member list and the API endpoint. It fails when the API server
// or etcd does not answer: an empty answer would read as a cluster
// without nodes.
var clusterStateScript = `nodes=$(` + kubectl + ` get nodes -o jsonpath='{range .items[*]}{.metadata.name}{" "}{.status.conditions[?(@.type=="Ready")].status}{" "}{.status.addresses[?(@.type=="InternalIP")].address}{"\n"}{end}')
printf '%s\n' "$nodes" | sed -n 's/^./node=&/p'
members=$(` + etcdGateway(memberList, "{}") + ` | tr -d '\n')
echo "etcd-members=$members"
echo "endpoint=$(sed -n 's/^ *server: *//p' /etc/kubernetes/admin.conf | head -n 1)"
`

// ReadCluster reads the cluster's Nodes, etcd's members and the API
// endpoint on a master.
func ReadCluster(ctx context.Context, master Querier) (ClusterState, error) {
	out, err := master.Query(ctx, whatClusterState, clusterStateScript)
	if err != nil {
		return ClusterState{}, err
	}
	st := ClusterState{Nodes: map[string]Node{}}
	for _, l := range lines(string(out)) {
		k, v, _ := strings.Cut(l, "=")
		switch k {
		case "node":
			f := strings.SplitN(v, " ", 3)
			n := Node{Ready: len(f) > 1 && f[1] == "True"}
			if len(f) > 2 {
				n.Address = f[2]
			}
			st.Nodes[f[0]] = n
		case "etcd-members":
			if st.Members, err = parseMembers(v); err != nil {
				return ClusterState{}, err
			}
		case "endpoint":
			if u, err := url.Parse(v); err == nil {
				st.Endpoint = u.Hostname()
			}
		}
	}
	return st, nil
}

// Named are the members of that name (two, when a host joined again at
// another address before its old member was removed).
func (s ClusterState) Named(name string) []Member {
	var out []Member
	for _, m := range s.Members {
		if m.Name == name {
			out = append(out, m)
		}
	}
	return out
}

// Holds reports whether the cluster holds anything of node name: its
// Node or an etcd member.
func (s ClusterState) Holds(name string) bool {
	_, ok := s.Nodes[name]
	return ok || len(s.Named(name)) > 0
}

// Left says what of node name the cluster still holds, or "" when it
// holds nothing.
func (s ClusterState) Left(name string) string {
	var left []string
	if _, ok := s.Nodes[name]; ok {
		left = append(left, "Node "+name)
	}
	for _, m := range s.Named(name) {
		left = append(left, fmt.Sprintf("etcd member %s (ID %s)", name, m.ID))
	}
	return strings.Join(left, ", ")
}

// DeleteNode deletes node's Node object, if it is there.
func DeleteNode(ctx context.Context, master Querier, node string) error {
	_, err := master.Query(ctx, whatDeleteNode+node, kubectl+" delete node "+shellQuote(node)+" --ignore-not-found --wait=false >/dev/null\n")
	return err
}

// RemoveMember removes member m from etcd, through the master's etcd.
func RemoveMember(ctx context.Context, master Querier, m Member) error {
	// parseMembers checked the ID is a number: it goes into the script.
	_, err := master.Query(ctx, whatRemoveMember+m.ID+" ("+m.Name+")",
		etcdGateway(memberRemove, `{"ID":"`+m.ID+`"}`)+" >/dev/null\n")
	return err
}

// DrainJob drains node on a master: its pods are evicted, those of
// DaemonSets left, emptyDir data and pods of no controller deleted. kubectl
// gives up after timeout (pods on a host that is gone never finish
// terminating; its --timeout=0s would wait for ever, so it is at least a
// second); the job's deadline is a minute later. A node already gone is
// nothing to drain.
func DrainJob(node string, timeout time.Duration) Job {
	q := shellQuote(node)
	script := `found=$(` + kubectl + ` get node ` + q + ` --ignore-not-found -o name)
if [ -z "$found" ]; then echo "node "` + q + `" is gone: nothing to drain"; exit 0; fi
` + kubectl + ` drain ` + q + ` --ignore-daemonsets --delete-emptydir-data --force --timeout=` + fmt.Sprintf("%ds", max(1, int(timeout.Seconds()))) + ` 2>&1
`
	return Job{Name: JobDrain + node, Script: script, Deadline: timeout + time.Minute}
}

// Marks are the kubeadm marks on a host's disk, which init.sh and
// join.sh write only once their kubeadm ended well there: a host whose
// disk was written again has none.
type Marks struct{ Init, Join bool }

// Any reports whether the host's disk holds a node kubeadm made.
func (m Marks) Any() bool { return m.Init || m.Join }

const marksScript = `for m in init join; do if [ -e /etc/bootstick/kubeadm-$m.done ]; then echo "$m"; fi; done
`

// ReadMarks reads the kubeadm marks on host.
func ReadMarks(ctx context.Context, host Querier) (Marks, error) {
	out, err := host.Query(ctx, whatMarks, marksScript)
	if err != nil {
		return Marks{}, err
	}
	var m Marks
	for _, l := range lines(string(out)) {
		m.Init = m.Init || l == "init"
		m.Join = m.Join || l == "join"
	}
	return m, nil
}
