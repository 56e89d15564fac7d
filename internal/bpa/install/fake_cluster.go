package install

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	bpa "github.com/bootstick/bootstick/internal/bpa/v1alpha1"
)

type fakeNode struct {
	ready bool
	addr  string
}

type fakeMember struct {
	id         uint64
	name, addr string
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
