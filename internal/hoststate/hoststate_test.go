package hoststate

import (
	"context"
	"testing"
	"time"

	metal3 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bootstick/bootstick/internal/kube"
	"github.com/bootstick/bootstick/internal/kubetest"
	"github.com/bootstick/bootstick/internal/render"
	"github.com/bootstick/bootstick/internal/site"
	"github.com/bootstick/bootstick/internal/sshkeys"
	"github.com/bootstick/bootstick/internal/testkit"
	"github.com/bootstick/bootstick/manifests"
)

func TestSince(t *testing.T) {
	at := func(min int) metav1.Time { return metav1.NewTime(time.Date(2025, 1, 1, 0, min, 0, 0, time.UTC)) }
	h := metal3.OperationHistory{
		Register:    metal3.OperationMetric{Start: at(1), End: at(2)},
		Inspect:     metal3.OperationMetric{Start: at(3), End: at(4)},
		Provision:   metal3.OperationMetric{Start: at(5), End: at(6)},
		Deprovision: metal3.OperationMetric{Start: at(7)},
	}
	for _, c := range []struct {
		state metal3.ProvisioningState
		h     metal3.OperationHistory
		want  time.Time
	}{
		{metal3.StateRegistering, h, at(1).Time},
		{metal3.StateInspecting, h, at(3).Time},
		{metal3.StateAvailable, h, at(4).Time},
		{metal3.StatePreparing, h, at(4).Time},
		{metal3.StateProvisioning, h, at(5).Time},
		{metal3.StateProvisioned, h, at(6).Time},
		{metal3.StateDeprovisioning, h, at(7).Time},
		// Never inspected: available since registration ended.
		{metal3.StateAvailable, metal3.OperationHistory{Register: h.Register}, at(2).Time},
		{metal3.StateNone, h, time.Time{}},
		{metal3.StateRegistering, metal3.OperationHistory{}, time.Time{}},
	} {
		if got := since(c.state, c.h); !got.Equal(c.want) {
			t.Errorf("since(%q) = %v, want %v", c.state, got, c.want)
		}
	}
}

// TestList applies a 10-host site to a real kube-apiserver with the CRDs
// installed and reads the hosts back: no operator runs, so no host has a
// state yet and the Provisioning reports no host.
func TestList(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real etcd and kube-apiserver from the toolchain")
	}
	env := kubetest.Start(t)
	c, err := kube.New(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.ApplyFS(ctx, manifests.FS, manifests.Files()); err != nil {
		t.Fatal(err)
	}
	s, err := site.Parse("gen/site.yaml", []byte(testkit.SiteYAML("ten", "t", 10, 7)), site.Options{})
	if err != nil {
		t.Fatal(err)
	}
	key, err := sshkeys.Generate(nil)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := render.Render(s, render.Options{SSHKey: key})
	if err != nil {
		t.Fatal(err)
	}
	us, err := render.Unstructured(objs)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(ctx, us); err != nil {
		t.Fatal(err)
	}

	hosts, err := List(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if len(hosts) != 10 || hosts[0].Name != "t-host-00" || hosts[0].Role != "master" || hosts[0].BootMACAddress != "52:54:00:07:00:00" {
		t.Fatalf("List = %+v", hosts)
	}
	for i, h := range hosts {
		if i > 0 && hosts[i-1].Name >= h.Name {
			t.Errorf("%s listed after %s", h.Name, hosts[i-1].Name)
		}
		if h.UID == "" || h.State != "" || !h.Since.IsZero() {
			t.Errorf("%s: UID %q, state %q since %v; want a UID and no state", h.Name, h.UID, h.State, h.Since)
		}
	}

	nodes, err := ClusterHosts(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 0 {
		t.Errorf("ClusterHosts = %+v, want none before the BPA reports", nodes)
	}
}
