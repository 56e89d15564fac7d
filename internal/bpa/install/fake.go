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
	"sort"
	"strings"
	"sync"
	"time"

	bpa "github.com/bootstick/bootstick/internal/bpa/v1alpha1"
)

// Fake stands in for the hosts in table tests of the controller, in
// memory. Jobs end as the test scripts them (one not scripted ends
// well), and queries answer from what the jobs did: a host whose init or
// join ended well is a Ready node and, for a master, a started etcd
// member. It records every call.
type Fake struct {
	// Jobs scripts jobs by host, then phase.
	Jobs map[string]map[string]FakeJob
	// OnRun, when set, is called as each Run returns.
	OnRun func(host, phase string, err error)

	mu      sync.Mutex
	calls   []FakeCall
	runs    map[string]int
	pending map[string]fakeResult
	nodes   map[string]bool
	masters map[string]bool
	expired map[string]chan struct{}
	ca      []byte
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
func (f *Fake) Connect(_ context.Context, name, _ string) (Executor, error) {
	f.record(FakeCall{Host: name, Kind: "connect"})
	return &fakeExec{f: f, host: name}, nil
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
	if f.runs == nil {
		f.runs, f.pending, f.nodes, f.masters = map[string]int{}, map[string]fakeResult{}, map[string]bool{}, map[string]bool{}
	}
	f.runs[key]++
	res = Result{Output: Redact(fj.Output, j.Secrets...)}
	if fj.Exit != 0 {
		err = &JobError{Host: e.host, Phase: j.Name, ExitCode: fj.Exit, Output: res.Output}
	} else if (j.Name == bpa.PhaseInit || j.Name == bpa.PhaseJoin) && !fj.Unobserved {
		f.nodes[e.host] = true
		f.masters[e.host] = j.Name == bpa.PhaseInit || strings.Contains(j.Script, "controlPlane:")
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
	switch {
	case what == whatKubeconfig:
		return []byte("apiVersion: v1\nkind: Config\n"), nil
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
		for n := range f.nodes {
			names = append(names, n+"=True\n")
		}
		sort.Strings(names)
		return []byte(strings.Join(names, "")), nil
	case what == whatInitState:
		if !f.nodes[e.host] {
			return []byte("the API server does not answer\n"), nil
		}
		return nil, nil
	case strings.HasPrefix(what, whatJoinState):
		node := strings.TrimPrefix(what, whatJoinState)
		ready := map[bool]string{true: "True", false: "False"}[f.nodes[node]]
		s := "node-ready=" + ready + "\n"
		if strings.Contains(script, "etcd-members") {
			type member struct {
				Name       string   `json:"name"`
				ClientURLs []string `json:"clientURLs"`
			}
			var ms []member
			for n := range f.nodes {
				if f.masters[n] {
					ms = append(ms, member{n, []string{"https://" + n + ":2379"}})
				}
			}
			b, _ := json.Marshal(map[string]any{"members": ms})
			s += "etcd-pod-ready=" + ready + "\netcd-members=" + string(b) + "\n"
		}
		return []byte(s), nil
	}
	return nil, fmt.Errorf("the fake has no answer for %q on %s", what, e.host)
}

// caPEM is a CA certificate made once; f.mu must be held.
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
