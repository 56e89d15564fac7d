package install

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	bpa "github.com/bootstick/bootstick/internal/bpa/v1alpha1"
)

// Fake stands in for the hosts in table tests of the controller, in
// memory. Jobs end as the test scripts them (one not scripted ends
// well), and queries answer from what the jobs did, as the cluster and
// the hosts' disks would. It models:
//   - each host's disk: the kubeadm mark init.sh or join.sh leaves there;
//     Reprovision wipes it;
//   - the cluster: its Nodes (Ready or not, at the address their host was
//     reached at), etcd's members (ID, name, peer address), its API
//     endpoint (the address of the host whose init made it), and how many
//     inits made one;
//   - kubeadm's rules: an init or a join ends at once on a disk with its
//     mark; an init on a disk without makes a new cluster (the old one's
//     nodes and members are lost to it); a join fails while a Ready Node
//     has its name, and a control-plane join while a member has its peer
//     address;
//   - the drain, Node deletion and member removal a master runs;
//   - each host's SR-IOV NICs and Intel PCI devices (Hardware), which role
//     matching reads on the host.
//
// A host whose init or join ended well is a Ready node and, for a master,
// a started etcd member. It records every call, and every change to the
// cluster in History.
type Fake struct {
	// Jobs scripts jobs by host, then job name (a phase, or JobDrain and
	// the node's name).
	Jobs map[string]map[string]FakeJob
	// OnRun, when set, is called as each Run returns.
	OnRun func(host, phase string, err error)
	// Hardware is each host's SR-IOV NICs and Intel PCI devices, by
	// host; a host not named has neither. SetHardware changes it.
	Hardware map[string]Hardware

	mu      sync.Mutex
	calls   []FakeCall
	runs    map[string]int
	pending map[string]fakeResult
	expired map[string]chan struct{}
	// addrs is where each host was reached; marks the kubeadm mark on
	// its disk (init or join).
	addrs, marks map[string]string
	// scripts is the last script of each job, by host/job.
	scripts  map[string]string
	nodes    map[string]*fakeNode
	members  []fakeMember
	endpoint string
	lastID   uint64
	clusters int
	history  []string
	ca       []byte
}

type fakeNode struct {
	ready bool
	addr  string
}

type fakeMember struct {
	id         uint64
	name, addr string
}

// FakeJob is how a scripted job goes.
type FakeJob struct {
	// Exit and Output are its end; a non-zero Exit fails it.
	Exit   int
	Output string
	// Silent: the host stops answering while the job runs. Run returns a
	// *DeadlineError when the job's or the context's deadline passes, or
	// when the test calls Expire.
	Silent bool
	// Cut: the connection is lost while the job runs. The job runs on the
	// host; the first Run returns an *UnreachableError, and the next
	// attaches and returns the job's end.
	Cut bool
	// Unobserved: the job ends well, but what it should make never shows:
	// the API server of an init never answers, the node of a join never
	// turns Ready.
	Unobserved bool
}

// FakeCall is one call: Kind is connect, run, query or close; Name the
// phase or what the query is.
type FakeCall struct {
	Host, Kind, Name string
	Attached         bool
	Err              string
}

type fakeResult struct {
	res Result
	err error
}

// Connect is the Fake's Connector.
func (f *Fake) Connect(_ context.Context, name, address string) (Executor, error) {
	f.record(FakeCall{Host: name, Kind: "connect"})
	f.mu.Lock()
	f.init()
	f.addrs[name] = address
	f.mu.Unlock()
	return &fakeExec{f: f, host: name}, nil
}

// init makes the maps; f.mu must be held.
func (f *Fake) init() {
	if f.runs == nil {
		f.runs, f.pending, f.addrs, f.marks, f.nodes = map[string]int{}, map[string]fakeResult{}, map[string]string{}, map[string]string{}, map[string]*fakeNode{}
		f.scripts = map[string]string{}
	}
}

// Calls are the calls so far, in order.
func (f *Fake) Calls() []FakeCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]FakeCall(nil), f.calls...)
}

// Runs is how many times phase's script ran on host (an attach is not a
// run).
func (f *Fake) Runs(host, phase string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.runs[host+"/"+phase]
}

// Script is the last script job ran on host ("" when none ran).
func (f *Fake) Script(host, job string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.scripts[host+"/"+job]
}

// Expire makes host's silent jobs pass their deadline now.
func (f *Fake) Expire(host string) {
	close(f.expiry(host))
}

// Reprovision writes host's disk again, as the baremetal-operator does:
// its kubeadm mark is gone and its kubelet stops (its Node turns
// NotReady), while the cluster keeps its Node and etcd member.
func (f *Fake) Reprovision(host string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.init()
	delete(f.marks, host)
	delete(f.scripts, host+"/"+bpa.PhaseInstall) // with the encryption key it wrote
	if n := f.nodes[host]; n != nil {
		n.ready = false
	}
	f.change("%s provisioned again", host)
}

// SetHardware gives host hw, as a card put in or taken out would.
func (f *Fake) SetHardware(host string, hw Hardware) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.Hardware == nil {
		f.Hardware = map[string]Hardware{}
	}
	f.Hardware[host] = hw
}

// Nodes are the cluster's Nodes, each with whether it is Ready.
func (f *Fake) Nodes() map[string]bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]bool{}
	for n, st := range f.nodes {
		out[n] = st.ready
	}
	return out
}

// Members are the names of etcd's members, sorted; a name shows as often
// as members have it.
func (f *Fake) Members() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, m := range f.members {
		out = append(out, m.name)
	}
	sort.Strings(out)
	return out
}

// Clusters is how many inits made a cluster.
func (f *Fake) Clusters() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.clusters
}

// History is every change to the cluster and the disks, in order.
func (f *Fake) History() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.history...)
}

// change records a change; f.mu must be held.
func (f *Fake) change(format string, args ...any) {
	f.history = append(f.history, fmt.Sprintf(format, args...))
}

func (f *Fake) expiry(host string) chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.expired == nil {
		f.expired = map[string]chan struct{}{}
	}
	if f.expired[host] == nil {
		f.expired[host] = make(chan struct{})
	}
	return f.expired[host]
}

func (f *Fake) record(c FakeCall) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, c)
}

type fakeExec struct {
	f    *Fake
	host string
}

func (e *fakeExec) Close() error {
	e.f.record(FakeCall{Host: e.host, Kind: "close"})
	return nil
}

func (e *fakeExec) Run(ctx context.Context, j Job) (res Result, err error) {
	f := e.f
	call := FakeCall{Host: e.host, Kind: "run", Name: j.Name}
	defer func() {
		if err != nil {
			call.Err = Redact(err.Error(), j.Secrets...)
		}
		call.Attached = res.Attached
		f.record(call)
		if f.OnRun != nil {
			f.OnRun(e.host, j.Name, err)
		}
	}()
	key := e.host + "/" + j.Name
	f.mu.Lock()
	f.init()
	f.scripts[key] = j.Script
	fj := f.Jobs[e.host][j.Name]
	if p, ok := f.pending[key]; ok {
		delete(f.pending, key)
		f.mu.Unlock()
		p.res.Attached = true
		return p.res, p.err
	}
	f.mu.Unlock()

	if fj.Silent {
		var deadline <-chan time.Time
		if j.Deadline > 0 {
			t := time.NewTimer(j.Deadline)
			defer t.Stop()
			deadline = t.C
		}
		select {
		case <-ctx.Done():
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return Result{}, ctx.Err()
			}
		case <-deadline:
		case <-f.expiry(e.host):
		}
		return Result{}, &DeadlineError{Host: e.host, Phase: j.Name, Deadline: j.Deadline, Detail: "its processes were killed"}
	}

	f.mu.Lock()
	f.init()
	f.runs[key]++
	res = Result{Output: Redact(fj.Output, j.Secrets...)}
	if fj.Exit != 0 {
		err = &JobError{Host: e.host, Phase: j.Name, ExitCode: fj.Exit, Output: res.Output}
	} else if !fj.Unobserved {
		var done Result
		if done, err = f.do(e.host, j); err != nil || res.Output == "" {
			res = done
		}
	}
	if fj.Cut {
		f.pending[key] = fakeResult{res, err}
		f.mu.Unlock()
		return Result{}, &UnreachableError{Address: e.host, Err: errors.New("the connection was cut while the job ran")}
	}
	f.mu.Unlock()
	return res, err
}

func (e *fakeExec) Query(_ context.Context, what, script string, secrets ...string) (out []byte, err error) {
	f := e.f
	defer func() {
		c := FakeCall{Host: e.host, Kind: "query", Name: what}
		if err != nil {
			c.Err = Redact(err.Error(), secrets...)
		}
		f.record(c)
	}()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.init()
	switch {
	case what == whatKubeconfig:
		// Each cluster's admin kubeconfig is its own.
		return []byte(fmt.Sprintf("apiVersion: v1\nkind: Config\n# cluster %d\n", f.clusters)), nil
	case what == whatToken:
		return []byte("abcdef.0123456789abcdef\n"), nil
	case what == whatCA:
		return f.caPEM()
	case what == whatUploadCerts:
		return []byte(strings.Repeat("ab", 32) + "\n"), nil
	case strings.HasPrefix(what, "applying "):
		return nil, nil
	case what == whatNodes:
		var names []string
		for n, st := range f.nodes {
			names = append(names, fmt.Sprintf("%s=%s\n", n, readyWord(st.ready)))
		}
		sort.Strings(names)
		return []byte(strings.Join(names, "")), nil
	case what == whatInitState:
		if f.nodes[e.host] == nil {
			return []byte("the API server does not answer\n"), nil
		}
		return nil, nil
	case strings.HasPrefix(what, whatJoinState):
		node := strings.TrimPrefix(what, whatJoinState)
		ready := readyWord(f.nodes[node] != nil && f.nodes[node].ready)
		s := "node-ready=" + ready + "\n"
		if strings.Contains(script, "etcd-members") {
			s += "etcd-pod-ready=" + ready + "\netcd-members=" + f.memberList() + "\n"
		}
		return []byte(s), nil
	case what == whatClusterState:
		var s strings.Builder
		for n, st := range f.nodes {
			fmt.Fprintf(&s, "node=%s %s %s\n", n, readyWord(st.ready), st.addr)
		}
		fmt.Fprintf(&s, "etcd-members=%s\nendpoint=https://%s:6443\n", f.memberList(), f.endpoint)
		return []byte(s.String()), nil
	case what == whatEncryption:
		// What the host's last install wrote, as the script carries it.
		sc := f.scripts[e.host+"/"+bpa.PhaseInstall]
		const open = "<<'END'\n" + encryptionHeader
		if i := strings.Index(sc, open); i >= 0 {
			conf := sc[i+len("<<'END'\n"):]
			return []byte(conf[:strings.Index(conf, "END\n")]), nil
		}
		return nil, nil
	case what == whatHardware:
		return []byte(f.Hardware[e.host].output()), nil
	case what == whatMarks:
		return []byte(f.marks[e.host] + "\n"), nil
	case strings.HasPrefix(what, whatDeleteNode):
		node := strings.TrimPrefix(what, whatDeleteNode)
		if f.nodes[node] != nil {
			delete(f.nodes, node)
			f.change("node %s deleted", node)
		}
		return nil, nil
	case strings.HasPrefix(what, whatRemoveMember):
		return nil, f.removeMember(strings.Fields(strings.TrimPrefix(what, whatRemoveMember))[0])
	}
	return nil, fmt.Errorf("the fake has no answer for %q on %s", what, e.host)
}

// do is what a job that ended well did; f.mu must be held.
func (f *Fake) do(host string, j Job) (Result, error) {
	addr := f.addrs[host]
	switch {
	case j.Name == bpa.PhaseInit && f.marks[host] == "init":
		return Result{Output: "created"}, nil // init.sh ends at its mark
	case j.Name == bpa.PhaseInit:
		f.clusters++
		f.nodes = map[string]*fakeNode{host: {ready: true, addr: addr}}
		f.members, f.endpoint, f.ca = nil, addr, nil // a new CA too
		f.addMember(host, addr)
		f.marks[host] = "init"
		f.change("kubeadm init on %s made cluster %d", host, f.clusters)
		return Result{Output: "created"}, nil
	case j.Name == bpa.PhaseJoin && f.marks[host] != "":
		return Result{Output: "joined"}, nil // join.sh ends at a mark
	case j.Name == bpa.PhaseJoin:
		return f.join(host, addr, strings.Contains(j.Script, "controlPlane:"))
	case strings.HasPrefix(j.Name, JobDrain):
		node := strings.TrimPrefix(j.Name, JobDrain)
		if f.nodes[node] != nil {
			f.change("node %s drained", node)
		}
		return Result{}, nil
	}
	return Result{}, nil
}

// join is kubeadm join of host at addr; f.mu must be held.
func (f *Fake) join(host, addr string, master bool) (Result, error) {
	fail := func(msg string) (Result, error) {
		return Result{Output: msg}, &JobError{Host: host, Phase: bpa.PhaseJoin, ExitCode: 6, Output: msg}
	}
	if n := f.nodes[host]; n != nil && n.ready {
		return fail(fmt.Sprintf("a Node with name %q and status \"Ready\" already exists in the cluster", host))
	}
	if master && slices.ContainsFunc(f.members, func(m fakeMember) bool { return m.addr == addr }) {
		return fail("error execution phase control-plane-join/etcd: etcdserver: Peer URLs already exists")
	}
	if f.nodes[host] != nil {
		f.change("node %s registered over its stale Node", host)
	} else {
		f.change("node %s registered", host)
	}
	f.nodes[host] = &fakeNode{ready: true, addr: addr}
	if master {
		f.addMember(host, addr)
	}
	f.marks[host] = "join"
	return Result{Output: "joined"}, nil
}

// addMember adds a started member; f.mu must be held.
func (f *Fake) addMember(name, addr string) {
	f.lastID += 0x1111
	f.members = append(f.members, fakeMember{id: f.lastID, name: name, addr: addr})
	f.change("etcd member %s added", name)
}

func (f *Fake) removeMember(id string) error {
	for i, m := range f.members {
		if strconv.FormatUint(m.id, 10) == id {
			f.members = slices.Delete(f.members, i, i+1)
			f.change("etcd member %s removed", m.name)
			return nil
		}
	}
	return fmt.Errorf("etcd: member %s not found", id)
}

// memberList is etcd's member list as its gateway answers it (IDs as
// strings); f.mu must be held.
func (f *Fake) memberList() string {
	type member struct {
		ID         string   `json:"ID"`
		Name       string   `json:"name"`
		PeerURLs   []string `json:"peerURLs"`
		ClientURLs []string `json:"clientURLs"`
	}
	ms := []member{}
	for _, m := range f.members {
		ms = append(ms, member{strconv.FormatUint(m.id, 10), m.name, []string{"https://" + m.addr + ":2380"}, []string{"https://" + m.addr + ":2379"}})
	}
	b, _ := json.Marshal(map[string]any{"header": map[string]any{}, "members": ms})
	return string(b)
}

func readyWord(ready bool) string {
	if ready {
		return "True"
	}
	return "False"
}

// caPEM is a CA certificate made once per cluster; f.mu must be held.
func (f *Fake) caPEM() ([]byte, error) {
	if f.ca != nil {
		return f.ca, nil
	}
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kubernetes"}, IsCA: true,
		NotBefore: time.Unix(0, 0), NotAfter: time.Unix(1<<32, 0), BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		return nil, err
	}
	f.ca = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return f.ca, nil
}
