//go:build e2e

package firstboot

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/command"
	"github.com/bootstick/bootstick/internal/hoststate"
	"github.com/bootstick/bootstick/internal/kube"
	"github.com/bootstick/bootstick/internal/render"
	"github.com/bootstick/bootstick/internal/testctx"
	"github.com/bootstick/bootstick/internal/vsite"
)

// TestHostProvisionTwo provisions two virtual hosts at once in host mode
// (make e2e): both end provisioned, and the log gives each one's time
// from registering to provisioned and the time for both, to set beside
// Journey A's one host (TestHostProvision) on the same machine.
func TestHostProvisionTwo(t *testing.T) {
	tc := toolchainDir(t)
	files := filepath.Join(filepath.Dir(filepath.Join(tc, "oci")), "files")
	h := newHostRun(t, tc)
	ctx, cancel := testctx.New(t, 60*time.Minute)
	defer cancel()
	machines := []vsite.Machine{
		{Name: "node-a", MAC: "52:54:00:b0:09:10", BMCPort: 6230, BMCUser: "admin", BMCPassword: "bmc-" + randomHex(t, 6)},
		{Name: "node-b", MAC: "52:54:00:b0:09:11", BMCPort: 6231, BMCUser: "admin", BMCPassword: "bmc-" + randomHex(t, 6)},
	}
	vs := startSite(t, ctx, machines)
	sum, _, err := cas.HashFile(filepath.Join(files, "debian-13-compute.qcow2"))
	if err != nil {
		t.Fatal(err)
	}
	sitePath := writeSite(t, vs, vsite.SiteConfig{
		Cluster: "provision-two",
		Image: vsite.SiteImage{URL: fmt.Sprintf("http://%s:%d/images/debian-13-compute.qcow2", m3Address, render.ImagePort),
			Checksum: sum.Hex(), Format: "qcow2"},
		Hosts: []vsite.SiteHost{{Machine: "node-a", Address: netip.MustParseAddr("172.22.0.60")}, {Machine: "node-b", Address: netip.MustParseAddr("172.22.0.61")}},
	})
	out, err := h.cmd("run", "--mode", "host", "--bundle", filepath.Join(tc, "oci"), "--data", h.data, "--site", sitePath).CombinedOutput()
	if err != nil {
		t.Fatalf("run: %v\n%s", err, command.Tail(string(out), 40))
	}
	c, err := kube.Load(adminConf)
	if err != nil {
		t.Fatal(err)
	}
	states, err := hoststate.List(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	var first, last time.Time
	for _, s := range states {
		if s.State != "provisioned" {
			t.Errorf("%s is %s (%s)", s.Name, s.State, s.Error)
			continue
		}
		historyTable(t, s.Name, s.History)
		if r := s.History.Register.Start.Time; first.IsZero() || r.Before(first) {
			first = r
		}
		if p := s.History.Provision.End.Time; p.After(last) {
			last = p
		}
	}
	t.Logf("two hosts in parallel: the first registering to the last provisioned in %v", last.Sub(first).Round(time.Second))
	for _, m := range []struct{ name, ip string }{{"node-a", "172.22.0.60"}, {"node-b", "172.22.0.61"}} {
		if hostname := sshRun(t, ctx, h.data, m.name, m.ip, vs.SerialLog(m.name), "hostname")[0]; hostname != m.name {
			t.Errorf("%s calls itself %q", m.ip, hostname)
		}
	}
}
