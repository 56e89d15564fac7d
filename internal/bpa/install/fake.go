package install

import (
	"context"
	"errors"
	"fmt"
	"sort"
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

// Expire makes host's silent jobs pass their deadline now.
func (f *Fake) Expire(host string) {
	close(f.expiry(host))
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
