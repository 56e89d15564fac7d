package sitestep

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	bpa "github.com/bootstick/bootstick/internal/bpa/v1alpha1"
	"github.com/bootstick/bootstick/internal/kube"
	"github.com/bootstick/bootstick/internal/render"
)

// TestStaleRemoveHost: of a removed host, the objects render makes for it
// and bootstick applied go; a kept host's, the site's shared objects and
// anything the site step did not make stay.
func TestStaleRemoveHost(t *testing.T) {
	type obj struct {
		kind, ns, name string
		labels         map[string]string
		manager        string
		op             metav1.ManagedFieldsOperationType
	}
	ours := func(host string) map[string]string {
		l := map[string]string{render.LabelManagedBy: "bootstick", render.LabelCluster: "test"}
		if host != "" {
			l[render.LabelHost], l[render.LabelRole] = host, "worker"
		}
		return l
	}
	with := func(l map[string]string, k, v string) map[string]string {
		l[k] = v
		return l
	}
	apply := metav1.ManagedFieldsOperationApply
	objs := []obj{
		// host-2, removed: all four go.
		{"BareMetalHost", render.Namespace, "host-2", ours("host-2"), kube.FieldManager, apply},
		{"Secret", render.Namespace, "host-2-bmc-secret", ours("host-2"), kube.FieldManager, apply},
		{"Secret", render.Namespace, "host-2-user-data", ours("host-2"), kube.FieldManager, apply},
		{"Secret", render.Namespace, "host-2-network-data", ours("host-2"), kube.FieldManager, apply},
		// host-0, kept.
		{"BareMetalHost", render.Namespace, "host-0", ours("host-0"), kube.FieldManager, apply},
		{"Secret", render.Namespace, "host-0-bmc-secret", ours("host-0"), kube.FieldManager, apply},
		// The site's shared objects.
		{"Secret", render.Namespace, render.SSHKeySecret, ours(""), kube.FieldManager, apply},
		{"Provisioning", render.Namespace, "test", ours(""), kube.FieldManager, apply},
		// Not the site step's: another name, kind, namespace, cluster or
		// manager, a plain update, or the labels of Ironic's settings.
		{"Secret", render.Namespace, "host-2-kubeconfig", ours("host-2"), kube.FieldManager, apply},
		{"PreprovisioningImage", render.Namespace, "host-2", ours("host-2"), "baremetal-operator", metav1.ManagedFieldsOperationUpdate},
		{"Secret", "default", "host-2-bmc-secret", ours("host-2"), kube.FieldManager, apply},
		{"Secret", render.Namespace, "host-2-bmc-secret", with(ours("host-2"), render.LabelCluster, "other"), kube.FieldManager, apply},
		{"Secret", render.Namespace, "host-2-user-data", ours("host-2"), "kubectl-client-side-apply", metav1.ManagedFieldsOperationUpdate},
		{"Secret", render.Namespace, "host-2-user-data", ours("host-2"), kube.FieldManager, metav1.ManagedFieldsOperationUpdate},
		{"Secret", render.Namespace, "host-2-bmc-secret", with(ours("host-2"), render.LabelManagedBy, "bootstick-firstboot"), kube.FieldManager, apply},
		{"BareMetalHost", render.Namespace, "host-2", map[string]string{render.LabelHost: "host-2"}, kube.FieldManager, apply},
	}
	var in []unstructured.Unstructured
	for _, o := range objs {
		u := unstructured.Unstructured{}
		u.SetKind(o.kind)
		u.SetNamespace(o.ns)
		u.SetName(o.name)
		u.SetLabels(o.labels)
		u.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "baremetal-operator", Operation: metav1.ManagedFieldsOperationUpdate},
			{Manager: o.manager, Operation: o.op}})
		in = append(in, u)
	}
	var got []string
	for _, u := range Stale(in, "test", []string{"host-0", "host-1", "host-3"}) {
		got = append(got, u.GetKind()+"/"+u.GetName())
	}
	want := "BareMetalHost/host-2 Secret/host-2-bmc-secret Secret/host-2-user-data Secret/host-2-network-data"
	if strings.Join(got, " ") != want {
		t.Errorf("Stale =\n%s\nwant\n%s", strings.Join(got, " "), want)
	}
	if got := Stale(in, "test", []string{"host-0", "host-2"}); len(got) != 0 {
		t.Errorf("with every host kept, Stale = %v", got)
	}
}

// A master added before the application cluster's first master (by name)
// would make a second cluster: refused; any other is not.
func TestFirstMasterAddHost(t *testing.T) {
	done := &metav1.Time{}
	node := func(name, phase string) bpa.HostStatus {
		return bpa.HostStatus{Name: name, Phases: []bpa.Phase{{Name: bpa.PhaseInstall, Finished: done}, {Name: phase, Finished: done}}}
	}
	cluster := []bpa.HostStatus{node("m-1", bpa.PhaseInit), node("m-2", bpa.PhaseJoin), {Name: "w-1"}}
	for _, c := range []struct {
		masters []string
		refused bool
	}{
		{[]string{"m-1", "m-2"}, false},
		{[]string{"m-3", "m-1"}, false},
		{[]string{"m-2"}, false},       // the first master removed: the next is a node
		{[]string{"m-0", "m-1"}, true}, // before it
		{[]string{"m-9"}, true},        // every node removed
	} {
		why := firstMasterProblem(c.masters, cluster)
		if (why != "") != c.refused {
			t.Errorf("masters %v: %q", c.masters, why)
		}
	}
	if why := firstMasterProblem([]string{"a"}, []bpa.HostStatus{{Name: "m-1"}}); why != "" {
		t.Errorf("no cluster yet: %q", why)
	}
}
