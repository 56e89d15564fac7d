package install

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// The observed state of the cluster, read on a master with its admin
// kubeconfig: the first, or the one the BPA works through while the
// first is away (see controller/cleanup.go). A phase is done when this
// says so, never because a file kubeadm writes early exists: admin.conf
// comes before the addons and the bootstrap-token RBAC, kubelet.conf
// before a control-plane join's etcd member.

const kubectl = "kubectl --kubeconfig /etc/kubernetes/admin.conf --request-timeout=20s"

// What the queries are called; the fake answers by these.
const (
	whatInitState = "reading the cluster's addons and bootstrap RBAC"
	whatJoinState = "reading the state of node "
)

// initStateScript prints one line for each thing a made cluster lacks:
// an answering API server, kube-proxy and CoreDNS, the cluster-info
// ConfigMap and the bootstrap-token RBAC that joins need.
const initStateScript = `k() { ` + kubectl + ` "$@" >/dev/null 2>&1; }
if ! k get --raw /readyz; then echo "the API server does not answer"; exit 0; fi
k -n kube-system get deployment coredns || echo "no CoreDNS Deployment"
k -n kube-system get daemonset kube-proxy || echo "no kube-proxy DaemonSet"
k -n kube-public get configmap cluster-info || echo "no cluster-info ConfigMap"
k get clusterrolebinding kubeadm:kubelet-bootstrap kubeadm:get-nodes || echo "no bootstrap-token RBAC (ClusterRoleBindings kubeadm:kubelet-bootstrap, kubeadm:get-nodes)"
`

// InitMissing reads, on the first master, what the cluster still lacks
// to count as made: nothing when it is.
func InitMissing(ctx context.Context, master Querier) ([]string, error) {
	out, err := master.Query(ctx, whatInitState, initStateScript)
	if err != nil {
		return nil, err
	}
	return lines(string(out)), nil
}

// joinStateScript prints the node's Ready condition and, for a master,
// its etcd Pod's Ready condition and etcd's member list (from the
// master's etcd, with the API server's client certificate).
func joinStateScript(node string, master bool) string {
	s := `node=$(` + kubectl + ` get node ` + shellQuote(node) + ` -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null || true)
echo "node-ready=$node"
`
	if master {
		s += `pod=$(` + kubectl + ` -n kube-system get pod ` + shellQuote("etcd-"+node) + ` -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null || true)
echo "etcd-pod-ready=$pod"
members=$(` + etcdGateway(memberList, "{}") + ` 2>/dev/null | tr -d '\n' || true)
echo "etcd-members=$members"
`
	}
	return s
}

// JoinMissing reads, on a master, what node still lacks to count
// as joined: Ready, and for a master an etcd member of its name that has
// started (it has client URLs; one added but not started has neither
// name nor URLs), votes (no longer a learner), and whose etcd Pod the
// kubelet reports Ready (its probes ask that member for its health).
func JoinMissing(ctx context.Context, on Querier, node string, master bool) ([]string, error) {
	out, err := on.Query(ctx, whatJoinState+node, joinStateScript(node, master))
	if err != nil {
		return nil, err
	}
	st := map[string]string{}
	for _, l := range lines(string(out)) {
		if k, v, ok := strings.Cut(l, "="); ok {
			st[k] = v
		}
	}
	var missing []string
	if st["node-ready"] != "True" {
		missing = append(missing, fmt.Sprintf("node %s is not Ready (Ready=%s)", node, orNone(st["node-ready"])))
	}
	if !master {
		return missing, nil
	}
	if st["etcd-pod-ready"] != "True" {
		missing = append(missing, fmt.Sprintf("Pod etcd-%s is not Ready (Ready=%s)", node, orNone(st["etcd-pod-ready"])))
	}
	members, err := parseMembers(st["etcd-members"])
	if err != nil {
		return append(missing, "etcd's member list could not be read on the master"), nil
	}
	started := false
	for _, m := range members {
		if m.Name == node && m.Started {
			started = true
			if m.Learner {
				missing = append(missing, fmt.Sprintf("etcd member %s is still a learner", node))
			}
		}
	}
	if !started {
		missing = append(missing, fmt.Sprintf("etcd lists no started member %s", node))
	}
	return missing, nil
}

// The paths of etcd's gRPC gateway the BPA posts to.
const (
	memberList   = "/v3/cluster/member/list"
	memberRemove = "/v3/cluster/member/remove"
)

// etcdGateway posts body to path on the master's etcd, with the API
// server's etcd client certificate; it fails on an HTTP error, printing
// etcd's answer.
func etcdGateway(path, body string) string {
	return `curl -sS --fail-with-body --max-time 20 --cacert /etc/kubernetes/pki/etcd/ca.crt --cert /etc/kubernetes/pki/apiserver-etcd-client.crt \
	--key /etc/kubernetes/pki/apiserver-etcd-client.key -X POST -d ` + shellQuote(body) + ` https://127.0.0.1:2379` + path
}

// Member is one of etcd's members, as its gateway lists them.
type Member struct {
	// ID is the member's uint64 ID in decimal (the gateway writes it as
	// a JSON string).
	ID   string
	Name string
	// Started: the member has run and published its client URLs; one
	// added by a join but not started has neither name nor URLs.
	Started bool
	Learner bool
}

// parseMembers reads the gateway's answer to a member list.
func parseMembers(s string) ([]Member, error) {
	var ml struct {
		Members []struct {
			ID         json.RawMessage `json:"ID"`
			Name       string          `json:"name"`
			ClientURLs []string        `json:"clientURLs"`
			IsLearner  bool            `json:"isLearner"`
		} `json:"members"`
	}
	if err := json.Unmarshal([]byte(s), &ml); err != nil {
		return nil, fmt.Errorf("reading etcd's member list: %w", err)
	}
	out := make([]Member, 0, len(ml.Members))
	for _, m := range ml.Members {
		id := strings.Trim(string(m.ID), `"`)
		if _, err := strconv.ParseUint(id, 10, 64); err != nil {
			return nil, fmt.Errorf("reading etcd's member list: member %q has ID %s, not a uint64", m.Name, m.ID)
		}
		out = append(out, Member{ID: id, Name: m.Name, Started: len(m.ClientURLs) > 0, Learner: m.IsLearner})
	}
	return out, nil
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}
