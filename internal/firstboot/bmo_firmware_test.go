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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/command"
	"github.com/bootstick/bootstick/internal/kube"
	"github.com/bootstick/bootstick/internal/render"
	"github.com/bootstick/bootstick/internal/status"
	"github.com/bootstick/bootstick/internal/testctx"
	"github.com/bootstick/bootstick/internal/vsite"
)

// The message BMO v0.6.0's HostFirmwareComponents reconciler returns when
// Ironic offers no firmware API (< 1.86): the path is taken, and left
// before the nil BMC accessor is dereferenced.
const firmwarePathAvoided = "current ironic version does not support firmware updates"

// TestBMOFirmwareDefectAvoided proves the way round a defect of the
// baremetal-operator v0.6.0. Against an Ironic that offers API 1.86, its
// HostFirmwareComponents reconciler lists a host's firmware, and when the
// host's firmware interface is no-firmware (every ipmi host's) it
// dereferences a nil BMC accessor (pkg/provisioner/ironic/ironic.go,
// GetFirmwareComponents ignores the error of bmcAccess()): BMO exits, and
// again on every restart. The appliance's Ironic offers 1.83 (release
// 22.0), which has all BMO needs (>= 1.81) and not the firmware API.
//
// One host with an ipmi BMC address goes registering → inspecting →
// provisioned through the real BMO and Ironic of host mode, on Ironic's
// fake hardware with a fake agent answering inspection. The host's
// HostFirmwareComponents gets a valid status (see below why BMO cannot
// write one itself), and a new BMO reconciles it, takes the path and
// leaves it with an error; Ironic and BMO stay Running with 0 restarts
// (for bmoSoak, 10 minutes under `make e2e`). Last, the control: the same
// Ironic unpinned (its own API, above 1.86), with the node's firmware
// interface no-firmware, crashes BMO in GetFirmwareComponents, so the pin
// is what keeps it running.
func TestBMOFirmwareDefectAvoided(t *testing.T) {
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
	if v := ironicMaxVersion(t); v != "1.83" {
		t.Fatalf("Ironic offers API %s, want 1.83 (pinned to release 22.0, below the firmware API 1.86)", v)
	}
	api := ironicAsBMO(t, ctx, c)
	// API 1.83 has no firmware interfaces: BMO's way out of the path is
	// its version check, before it looks at the node.
	createFakeNode(t, ctx, api, name, nil)
	actx, stopAgent := context.WithCancel(ctx)
	defer stopAgent()
	fakeAgent(actx, api, map[string]string{name: mac})
	runToEnd(t, h, iso, sitePath)
	states, err := c.HostStates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(states) != 1 || states[0].State != "provisioned" || states[0].History.Inspect.End.IsZero() {
		t.Fatalf("want %s inspected and provisioned, got %+v", name, states)
	}
	created := states[0].History.Register.Start.Time
	// The BMO that provisioned the host ran without a restart too.
	runningUnrestarted(t, ctx, c)

	// BMO v0.6.0 never gets there by itself: its reconciler first writes
	// the HostFirmwareComponents' status without the components that its
	// own CRD requires, and that write fails (status.components: Required
	// value), another defect of v0.6.0. A status that is already valid, as
	// a newer CRD would let BMO write, takes it past that write to
	// GetFirmwareComponents. A new BMO reconciles every
	// HostFirmwareComponents as it starts.
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	validFirmwareStatus(t, ctx, dyn, name)
	restartBMO(t, ctx, c)
	waitFor(t, ctx, 5*time.Minute, "BMO to take the firmware-components path", func() (bool, string) {
		log := podLog(render.BMONamespace, "deploy/baremetal-operator", "")
		return strings.Contains(log, firmwarePathAvoided), command.Tail(log, 3)
	})
	t.Logf("BMO took GetFirmwareComponents for %s and left it with %q", name, firmwarePathAvoided)
	if bmoSoak > 0 {
		t.Logf("watching Ironic and BMO for %s", bmoSoak)
	}
	soakUntil := time.Now().Add(bmoSoak)
	waitFor(t, ctx, bmoSoak+time.Minute, "the soak to end", func() (bool, string) {
		runningUnrestarted(t, ctx, c)
		return !time.Now().Before(soakUntil), fmt.Sprintf("%s to go", time.Until(soakUntil).Round(time.Second))
	})
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

	// The control: the same Ironic offering its own API version.
	unpinIronic(t, ctx, c)
	v := ironicMaxVersion(t)
	if minor, _ := strconv.Atoi(strings.TrimPrefix(v, "1.")); minor < 86 {
		t.Fatalf("unpinned Ironic offers API %s, want 1.86 or newer", v)
	}
	// Ironic's database went with its pod: enroll the node again, with
	// the firmware interface of every ipmi host (Ironic's ipmi hardware
	// type has no other; the field needs API 1.86); the new BMO finds it
	// by name and records its ID.
	api86 := *api
	api86.version = "1.86"
	uuid := createFakeNode(t, ctx, &api86, name, map[string]any{"firmware_interface": "no-firmware"})
	restartBMO(t, ctx, c)
	waitFor(t, ctx, 5*time.Minute, "the unpinned Ironic to crash BMO", func() (bool, string) {
		w, err := c.DeploymentState(ctx, render.BMONamespace, "baremetal-operator")
		if err != nil {
			return false, err.Error()
		}
		return w.Restarts > 0, fmt.Sprintf("BareMetalHost's Ironic node %s (the new one is %s), BMO %d restarts",
			bmhProvisioningID(ctx, dyn, name), uuid, w.Restarts)
	})
	prev := podLog(render.BMONamespace, "deploy/baremetal-operator", "", "--previous")
	for _, want := range []string{"nil pointer dereference", "GetFirmwareComponents"} {
		if !strings.Contains(prev, want) {
			t.Errorf("BMO restarted without %q in its last log:\n%s", want, command.Tail(prev, 30))
		}
	}
	if m := regexp.MustCompile(`(?m)^panic:.*$|^.*ironic\.\(\*ironicProvisioner\)\.GetFirmwareComponents.*$`).FindAllString(prev, 2); len(m) > 0 {
		t.Logf("Ironic unpinned (API %s): BMO crashed:\n  %s", v, strings.Join(m, "\n  "))
	}
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
			t.Fatalf("%s/%s with Ironic pinned: ready %v, %d restarts (%s)\n%s", d.ns, d.name, w.Ready, w.Restarts, w.Detail,
				command.Tail(podLog(d.ns, "deploy/"+d.name, d.container), 30))
		}
	}
}

// validFirmwareStatus writes a host's HostFirmwareComponents status as
// BMO v0.6.0's reconciler computes it for a host without updates (Valid,
// no change detected, no updates), with the components list its CRD
// requires, so that the reconciler has nothing to write and goes on to
// GetFirmwareComponents.
func validFirmwareStatus(t *testing.T, ctx context.Context, dyn dynamic.Interface, name string) {
	t.Helper()
	res := dyn.Resource(metal3.GroupVersion.WithResource("hostfirmwarecomponents")).Namespace(render.Namespace)
	hfc, err := res.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("BMO made no HostFirmwareComponents for %s: %v", name, err)
	}
	now := metav1.Now().UTC().Format(time.RFC3339)
	cond := func(typ, status string) map[string]any {
		return map[string]any{"type": typ, "status": status, "reason": "OK", "message": "",
			"observedGeneration": hfc.GetGeneration(), "lastTransitionTime": now}
	}
	hfc.Object["status"] = map[string]any{
		"updates": []any{}, "components": []any{}, "lastUpdated": now,
		"conditions": []any{cond("Valid", "True"), cond("ChangeDetected", "False")},
	}
	if _, err := res.UpdateStatus(ctx, hfc, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("writing the status of HostFirmwareComponents %s: %v", name, err)
	}
}

// restartBMO replaces the baremetal-operator's pod and waits for the new one.
func restartBMO(t *testing.T, ctx context.Context, c *kube.Client) {
	t.Helper()
	if err := c.CS.CoreV1().Pods(render.BMONamespace).DeleteCollection(ctx, metav1.DeleteOptions{},
		metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=baremetal-operator"}); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitDeployment(ctx, render.BMONamespace, "baremetal-operator", 5*time.Minute); err != nil {
		t.Fatal(err)
	}
}

// unpinIronic rolls Ironic out again without IRONIC_PIN_RELEASE, so that
// it offers its own newest API version.
func unpinIronic(t *testing.T, ctx context.Context, c *kube.Client) {
	t.Helper()
	d, err := c.CS.AppsV1().Deployments(render.IronicNamespace).Get(ctx, "ironic", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for i := range d.Spec.Template.Spec.Containers {
		ct := &d.Spec.Template.Spec.Containers[i]
		for j := range ct.Env {
			if ct.Env[j].Name == "IRONIC_PIN_RELEASE" {
				ct.Env[j].Value, found = "", true
			}
		}
	}
	if !found {
		t.Fatal("the ironic Deployment sets no IRONIC_PIN_RELEASE")
	}
	if _, err := c.CS.AppsV1().Deployments(render.IronicNamespace).Update(ctx, d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitDeployment(ctx, render.IronicNamespace, "ironic", 10*time.Minute); err != nil {
		t.Fatal(err)
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
