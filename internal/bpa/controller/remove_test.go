package controller

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bootstick/bootstick/internal/bpa/install"
	bpa "github.com/bootstick/bootstick/internal/bpa/v1alpha1"
)

// TestRemoveHost takes hosts out of an installed cluster's Provisioning
// and checks what an operator would: the nodes, etcd's members, the
// NodesRemoved condition and the Events. A removed node is drained, its
// etcd member removed and its Node deleted; a drain that cannot finish
// does not hold the removal; the master at the API endpoint and the last
// master are never removed.
func TestRemoveHost(t *testing.T) {
	ctx, c := apiSites(t)

	for _, tc := range []struct {
		name                   string
		masters, workers       []string
		keepMasters, keepWorks []string
		// add are hosts new to the spec, with a BareMetalHost each.
		add  []string
		jobs map[string]map[string]install.FakeJob
		// After the pass: the cluster's nodes and etcd's members, the
		// condition's reason, the history's steps in order, and Events.
		nodes, members []string
		reason         string
		steps          []string
		events         []string
	}{
		{name: "worker", masters: []string{"m0"}, workers: []string{"w1", "w2"}, keepMasters: []string{"m0"}, keepWorks: []string{"w1"},
			nodes: []string{"m0", "w1"}, members: []string{"m0"}, reason: ReasonRemoved,
			steps:  []string{"node w2 drained", "node w2 deleted"},
			events: []string{"Normal Removing removing node w2", "Normal Removed removed node w2"}},
		{name: "master, MastersOnly", masters: []string{"m0", "m1", "m2"}, keepMasters: []string{"m0", "m1"},
			nodes: []string{"m0", "m1"}, members: []string{"m0", "m1"}, reason: ReasonRemoved,
			steps:  []string{"node m2 drained", "etcd member m2 removed", "node m2 deleted"},
			events: []string{"Normal Removing removing master m2", "Normal Removed removed master m2"}},
		{name: "a drain that cannot finish", masters: []string{"m0"}, workers: []string{"w1"}, keepMasters: []string{"m0"},
			jobs:  map[string]map[string]install.FakeJob{"m0": {install.JobDrain + "w1": {Exit: 1, Output: `error: unable to drain node "w1" due to error: global timeout reached: 5m0s`}}},
			nodes: []string{"m0"}, members: []string{"m0"}, reason: ReasonRemoved,
			steps:  []string{"node w1 deleted"},
			events: []string{"Warning DrainFailed draining node w1 did not finish", "Normal Removed removed node w1"}},
		{name: "the master at the API endpoint", masters: []string{"m0", "m1"}, keepMasters: []string{"m1"},
			nodes: []string{"m0", "m1"}, members: []string{"m0", "m1"}, reason: ReasonEndpointMaster,
			events: []string{"Warning EndpointMaster not removing master m0", "10.0.0.1 is the cluster's API endpoint"}},
		{name: "every master replaced: the last master stays", masters: []string{"m0"}, workers: []string{"w1"}, keepMasters: []string{"m5"}, keepWorks: []string{"w1"}, add: []string{"m5"},
			nodes: []string{"m0", "w1"}, members: []string{"m0"},
			events: []string{"Warning " + ReasonOnlyMasterReprovisioned}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ex := &install.Fake{Jobs: tc.jobs}
			s := newAPISite(ctx, t, c, "remove-"+strings.ToLower(strings.NewReplacer(" ", "-", ",", "", ":", "").Replace(tc.name)), ex, tc.masters, tc.workers)
			s.installed(ctx)
			for i, n := range tc.add {
				s.addBMH(ctx, n, "52:54:00:00:01:"+string(rune('a'+i))+"0")
			}
			s.setSpec(ctx, tc.keepMasters, tc.keepWorks)
			mark := len(ex.History())
			p := s.reconcile(ctx)

			var nodes []string
			for n := range ex.Nodes() {
				nodes = append(nodes, n)
			}
			slices.Sort(nodes)
			if !slices.Equal(nodes, tc.nodes) || !slices.Equal(ex.Members(), tc.members) {
				t.Errorf("nodes %v and etcd members %v, want %v and %v", nodes, ex.Members(), tc.nodes, tc.members)
			}
			steps := ex.History()[mark:]
			if tc.steps == nil && len(steps) > 0 {
				t.Errorf("the cluster saw %v, want nothing removed", steps)
			}
			for i := 1; i < len(tc.steps); i++ {
				if !before(steps, tc.steps[i-1], tc.steps[i]) {
					t.Errorf("the cluster saw %v, want %q before %q", steps, tc.steps[i-1], tc.steps[i])
				}
			}
			cond := meta.FindStatusCondition(p.Status.Conditions, ConditionNodesRemoved)
			switch {
			case tc.reason == "" && cond != nil:
				t.Errorf("NodesRemoved %+v, want none: nothing was to be removed", cond)
			case tc.reason != "" && (cond == nil || cond.Reason != tc.reason || (cond.Status == metav1.ConditionTrue) != (tc.reason == ReasonRemoved)):
				t.Errorf("NodesRemoved %+v, want reason %s", cond, tc.reason)
			}
			for _, e := range tc.events {
				if !s.events.has(e) && !s.events.has("", e) {
					t.Errorf("no Event %q in %v", e, s.events.all())
				}
			}
			for _, h := range p.Status.Hosts {
				if h.State != bpa.HostReady && !slices.Contains(tc.add, h.Name) {
					t.Errorf("host %s is %s after the removal, want it Ready", h.Name, h.State)
				}
			}
			if ex.Clusters() != 1 {
				t.Errorf("%d clusters made, want one", ex.Clusters())
			}
			noLeaks(t, ex)
		})
	}
}

// TestRemoveHostGuards: a master no host names is removed only when
// another master of the Provisioning is a started etcd member and its
// address is not the cluster's API endpoint.
func TestRemoveHostGuards(t *testing.T) {
	x := &run{p: &bpa.Provisioning{Status: bpa.ProvisioningStatus{Hosts: []bpa.HostStatus{{Name: "m1", Role: RoleMaster}, {Name: "w1", Role: RoleWorker}}}}}
	member := func(name string, started bool) install.Member {
		return install.Member{ID: "1", Name: name, Started: started}
	}
	for _, c := range []struct {
		name string
		st   install.ClusterState
		want string // the refusal's reason, "" to remove
	}{
		{"a worker", install.ClusterState{Nodes: map[string]install.Node{"w9": {}}}, ""},
		{"a master beside a started one", install.ClusterState{Members: []install.Member{member("m9", true), member("m1", true)}}, ""},
		{"the API endpoint's master", install.ClusterState{Endpoint: "10.0.0.9", Nodes: map[string]install.Node{"m9": {Address: "10.0.0.9"}},
			Members: []install.Member{member("m9", true), member("m1", true)}}, ReasonEndpointMaster},
		{"beside a member not started", install.ClusterState{Members: []install.Member{member("m9", true), member("m1", false)}}, ReasonLastMaster},
		{"beside a worker's name only", install.ClusterState{Members: []install.Member{member("m9", true), member("w1", true)}}, ReasonLastMaster},
		{"alone", install.ClusterState{Members: []install.Member{member("m9", true)}}, ReasonLastMaster},
	} {
		err := x.mayRemove(c.st, "m9")
		got := ""
		if r, ok := err.(*refusal); ok {
			got = r.reason
		}
		if got != c.want || (err == nil) != (c.want == "") {
			t.Errorf("%s: mayRemove = %v, want reason %q", c.name, err, c.want)
		}
	}
}
