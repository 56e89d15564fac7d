//go:build e2e

package firstboot

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	metal3 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/command"
	"github.com/bootstick/bootstick/internal/hoststate"
	"github.com/bootstick/bootstick/internal/kube"
	"github.com/bootstick/bootstick/internal/render"
	"github.com/bootstick/bootstick/internal/status"
	"github.com/bootstick/bootstick/internal/testctx"
	"github.com/bootstick/bootstick/internal/vsite"
)

// bmoBaseline is the oldest Ironic API the baremetal-operator v0.13.2
// registers hosts with. Its stated baseline is 1.89 (pkg/provisioner/
// ironic/clients: attaching and detaching virtual media), but every node
// it creates carries disable_power_off, which Ironic takes from 1.95.
const bmoBaseline = 95

// TestBMOFirmwarePathSafe proves that the firmware path which crashed the
// baremetal-operator v0.6.0 is safe with v0.13.2, against Ironic's own,
// unpinned API. v0.6.0 dereferenced a nil BMC accessor in
// GetFirmwareComponents when Ironic offered the firmware API (1.86) and a
// host's firmware interface was no-firmware, as every ipmi host's is; the
// stick then pinned Ironic's API to 1.83. v0.13.2 needs 1.95 or newer and
// answers no-firmware with "host does not support Firmware Updates", so
// the pin is gone.
//
// One host with an ipmi BMC address goes registering → inspecting →
// provisioned through the real BMO and Ironic of host mode, on Ironic's
// fake hardware (firmware interface no-firmware) with a fake agent
// answering inspection. BMO asks for the host's firmware components as it
// registers it, and makes no HostFirmwareComponents for a host without
// firmware updates. Then a HostFirmwareComponents is created for the host,
// as a user asking for an update would, so that BMO's own reconciler of
// them takes the path too. Ironic and BMO stay Running with 0 restarts
// (for bmoSoak, 10 minutes under `make e2e`), and firstboot status says so.
func TestBMOFirmwarePathSafe(t *testing.T) {
	if testing.Short() {
		t.Skip("brings up a real node with Ironic and the baremetal-operator on this host (root, make toolchain)")
	}
	tc := toolchainDir(t)
	// The appliance as the stick brings it: mkusb's ISO is the bundle.
	iso := buildStickISO(t)
	h := newHostRun(t, tc)
	ctx, cancel := testctx.New(t, 30*time.Minute+bmoSoak)
	defer cancel()
	vs := startSite(t, ctx, nil)

	const name, mac = "fw-0", "52:54:00:fb:00:01"
	sum, _, err := cas.HashFile(filepath.Join(tc, "files", "debian-13-compute.qcow2"))
	if err != nil {
		t.Fatalf("%v: run make toolchain first", err)
	}
	sitePath := writeSite(t, vs, vsite.SiteConfig{Cluster: "firmware",
		Hosts: []vsite.SiteHost{{Machine: name, Role: "master", BMCAddress: "ipmi://172.22.0.2:7000",
			BMCPassword: "fake-bmc-password", BootMAC: mac}},
		Image: vsite.SiteImage{
			URL:      fmt.Sprintf("http://%s:%d/images/debian-13-compute.qcow2", m3Address, render.ImagePort),
			Checksum: sum.Hex(), Format: "qcow2"}})
	runToSite(t, h, iso, sitePath)
	c, err := kube.Load(adminConf)
	if err != nil {
		t.Fatal(err)
	}
	v := ironicMaxVersion(t)
	if apiMinor(v) < bmoBaseline {
		t.Fatalf("Ironic offers API %s, want 1.%d or newer (the baremetal-operator's baseline)", v, bmoBaseline)
	}
	t.Logf("Ironic offers its own API, %s: no pin", v)
	api := ironicAsBMO(t, ctx, c)
	api.version = v
	// The firmware interface of every ipmi host (Ironic's ipmi hardware
	// type has no other).
	createFakeNode(t, ctx, api, name, map[string]any{"firmware_interface": "no-firmware"})
	actx, stopAgent := context.WithCancel(ctx)
	defer stopAgent()
	fakeAgent(actx, api, map[string]string{name: mac})
	runToEnd(t, h, iso, sitePath)
	states, err := hoststate.List(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if len(states) != 1 || states[0].State != "provisioned" || states[0].History.Inspect.End.IsZero() {
		t.Fatalf("want %s inspected and provisioned, got %+v", name, states)
	}
	created := states[0].History.Register.Start.Time
	// The BMO that provisioned the host ran without a restart.
	runningUnrestarted(t, ctx, c)

	// BMO asked Ironic for the host's firmware components as it
	// registered the host, and was told that it has none to update.
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	hfcs := dyn.Resource(metal3.GroupVersion.WithResource("hostfirmwarecomponents")).Namespace(render.Namespace)
	if _, err := hfcs.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("HostFirmwareComponents of %s: %v; want none, for a host without firmware updates", name, err)
	}
	// BMO's reconciler of HostFirmwareComponents takes the path too. It
	// also reconciles on the BareMetalHost's events, so only what BMO
	// logs after the HostFirmwareComponents exists counts.
	logged := len(podLog(render.BMONamespace, "deploy/baremetal-operator", ""))
	// logSince is what BMO logged since then; a shorter log is a new
	// container's, and fails the test.
	logSince := func() string {
		log := podLog(render.BMONamespace, "deploy/baremetal-operator", "")
		if len(log) < logged {
			t.Fatalf("BMO's log shrank: it restarted\n%s", command.Tail(log, 30))
		}
		return log[logged:]
	}
	hfc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": metal3.GroupVersion.String(), "kind": "HostFirmwareComponents",
		"metadata": map[string]any{"name": name, "namespace": render.Namespace},
		"spec":     map[string]any{"updates": []any{}},
	}}
	if _, err := hfcs.Create(ctx, hfc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating a HostFirmwareComponents for %s: %v", name, err)
	}
	// BMO logs JSON; its HostFirmwareComponents reconciler starts each
	// pass with "start", and logs each way out before the firmware path
	// ("HostFirmwareComponents not found" is left out: a pass that began
	// just before the create may say it).
	ref := `"hostfirmwarecomponents":\{"name":"` + regexp.QuoteMeta(name) + `","namespace":"` + regexp.QuoteMeta(render.Namespace) + `"\}`
	reconciled := regexp.MustCompile(`(?m)^.*"msg":"start",` + ref + `.*$`)
	turnedBack := regexp.MustCompile(`(?m)^.*"msg":"(host is unmanaged[^"]*|host is currently detached[^"]*|provisioner is not ready|provisioner returns error)",` + ref + `.*$`)
	var since string
	waitFor(t, ctx, 5*time.Minute, "BMO to reconcile the HostFirmwareComponents", func() (bool, string) {
		since = logSince()
		return reconciled.MatchString(since), command.Tail(since, 3)
	})
	t.Logf("BMO reconciled %s's HostFirmwareComponents: %s", name, reconciled.FindString(since))
	if bmoSoak > 0 {
		t.Logf("watching Ironic and BMO for %s", bmoSoak)
	}
	soakUntil := time.Now().Add(bmoSoak)
	waitFor(t, ctx, bmoSoak+time.Minute, "the soak to end", func() (bool, string) {
		runningUnrestarted(t, ctx, c)
		return !time.Now().Before(soakUntil), fmt.Sprintf("%s to go", time.Until(soakUntil).Round(time.Second))
	})
	runningUnrestarted(t, ctx, c)
	if m := turnedBack.FindString(logSince()); m != "" {
		t.Errorf("BMO's reconciler turned back before the firmware path: %s", m)
	}
	// GetFirmwareComponents answered "unsupported": the reconciler wrote
	// no status (had Ironic listed components, it would have written
	// them, with its Valid and ChangeDetected conditions).
	got, err := hfcs.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st, ok := got.Object["status"]; ok {
		t.Errorf("HostFirmwareComponents %s has a status %v, want none (no-firmware)", name, st)
	}
	t.Logf("Ironic and BMO Running and ready with 0 restarts, %s after %s's BareMetalHost was created",
		time.Since(created).Round(time.Second), name)

	// firstboot status says the same.
	rep, sout := h.statusJSON()
	if rep.Cluster == nil {
		t.Fatalf("firstboot status shows no cluster:\n%s", sout)
	}
	seen := map[string]status.Service{}
	for _, sv := range rep.Cluster.Services {
		seen[sv.Name] = sv
	}
	for name, want := range map[string]string{"Ironic": "ready (its API answers)", "baremetal-operator": "ready"} {
		if sv := seen[name]; sv.State != want || sv.Restarts != 0 {
			t.Errorf("firstboot status shows %s as %+v, want %q with 0 restarts", name, sv, want)
		}
	}
}

// apiMinor is the minor number of an Ironic API version 1.N, or -1.
func apiMinor(v string) int {
	n, err := strconv.Atoi(strings.TrimPrefix(v, "1."))
	if err != nil || !strings.HasPrefix(v, "1.") {
		return -1
	}
	return n
}

// runningUnrestarted fails the test unless Ironic and BMO are ready and
// their containers never restarted.
func runningUnrestarted(t *testing.T, ctx context.Context, c *kube.Client) {
	t.Helper()
	for _, d := range []struct{ ns, name, container string }{
		{render.IronicNamespace, "ironic", "ironic"}, {render.BMONamespace, "baremetal-operator", ""}} {
		w, err := c.DeploymentState(ctx, d.ns, d.name)
		if err != nil {
			t.Fatal(err)
		}
		if !w.Ready || w.Restarts != 0 {
			t.Fatalf("%s/%s: ready %v, %d restarts (%s)\n%s", d.ns, d.name, w.Ready, w.Restarts, w.Detail,
				command.Tail(podLog(d.ns, "deploy/"+d.name, d.container), 30))
		}
	}
}

// bmhProvisioningID is the Ironic node a BareMetalHost's status names.
func bmhProvisioningID(ctx context.Context, dyn dynamic.Interface, name string) string {
	u, err := dyn.Resource(metal3.GroupVersion.WithResource("baremetalhosts")).Namespace(render.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	id, _, _ := unstructured.NestedString(u.Object, "status", "provisioning", "ID")
	return id
}
