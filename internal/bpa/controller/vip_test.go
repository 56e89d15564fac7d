package controller

import (
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bootstick/bootstick/internal/bpa/install"
	bpa "github.com/bootstick/bootstick/internal/bpa/v1alpha1"
	"github.com/bootstick/bootstick/internal/testctx"
)

// TestControlPlaneVIPOnMasters: a Provisioning with a control-plane VIP
// sets up keepalived on each master's install, the first master above
// the others, none on a worker, and init makes the VIP the cluster's
// endpoint; the cluster forms.
func TestControlPlaneVIPOnMasters(t *testing.T) {
	ctx, cancel := testctx.New(t, time.Minute)
	defer cancel()
	ex := &install.Fake{}
	site := newFakeSite(t, ex, []string{"master-0", "master-1", "master-2"}, []string{"worker-0"})
	var p bpa.Provisioning
	if err := site.c.Get(ctx, site.name, &p); err != nil {
		t.Fatal(err)
	}
	p.Spec.ControlPlaneVIP = "10.0.0.100"
	if err := site.c.Update(ctx, &p); err != nil {
		t.Fatal(err)
	}
	site.untilReady(ctx)
	prio := regexp.MustCompile(`\n\tpriority (\d+)\n`)
	for host, want := range map[string]string{"master-0": "150", "master-1": "100", "master-2": "100", "worker-0": ""} {
		s := ex.Script(host, "install")
		m := prio.FindStringSubmatch(s)
		switch {
		case s == "":
			t.Errorf("%s: no install ran", host)
		case want == "" && strings.Contains(s, "keepalived"):
			t.Errorf("%s (a worker) sets up keepalived", host)
		case want != "" && (m == nil || m[1] != want || !strings.Contains(s, "10.0.0.100/$bits dev $dev")):
			t.Errorf("%s: keepalived priority %v, want %s, holding 10.0.0.100", host, m, want)
		}
	}
	if s := ex.Script("master-0", "init"); !strings.Contains(s, "controlPlaneEndpoint: 10.0.0.100:6443") {
		t.Errorf("init does not make the VIP the endpoint:\n%s", s)
	}
	noLeaks(t, ex)
}

// TestControlPlaneVIPCannotChange: the API server refuses to set, change
// or remove a Provisioning's controlPlaneVIP once it exists, and takes
// other changes to its spec.
func TestControlPlaneVIPCannotChange(t *testing.T) {
	ctx, cancel := testctx.New(t, 2*time.Minute)
	defer cancel()
	_, c := apiServer(t, ctx)
	mk := func(name, vip string) *bpa.Provisioning {
		p := &bpa.Provisioning{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "metal3"},
			Spec: bpa.ProvisioningSpec{ControlPlaneVIP: vip, Masters: []map[string]bpa.Master{{"m0": {MACaddress: "52:54:00:00:00:01"}}}}}
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	with, without := mk("with", "10.0.0.100"), mk("without", "")
	for _, u := range []struct {
		p    *bpa.Provisioning
		vip  string
		want bool // accepted
	}{
		{with, "10.0.0.101", false},
		{with, "", false},
		{without, "10.0.0.100", false},
		{with, "10.0.0.100", true},
		{without, "", true},
	} {
		p := u.p.DeepCopy()
		p.Spec.ControlPlaneVIP = u.vip
		p.Spec.Workers = []map[string]bpa.Worker{{"w0": {MACaddress: "52:54:00:00:00:02"}}} // a change that is allowed
		err := c.Update(ctx, p)
		if (err == nil) != u.want || (err != nil && !strings.Contains(err.Error(), "controlPlaneVIP cannot change")) {
			t.Errorf("%s: controlPlaneVIP %q to %q: %v, want accepted %v", u.p.Name, u.p.Spec.ControlPlaneVIP, u.vip, err, u.want)
		}
		if err == nil {
			u.p.ResourceVersion = p.ResourceVersion
		}
	}
}
