package sitestep

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bootstick/bootstick/internal/logctx"

	"github.com/bootstick/bootstick/internal/hoststate"
	"github.com/bootstick/bootstick/internal/kube"

	metal3 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/bootstick/bootstick/internal/kubetest"
	"github.com/bootstick/bootstick/internal/render"
	"github.com/bootstick/bootstick/internal/site"
	"github.com/bootstick/bootstick/manifests"
)

func writeSite(t *testing.T, dir string, n int) (string, []string) {
	t.Helper()
	var b strings.Builder
	b.WriteString(`apiVersion: bootstick.dev/v1alpha1
kind: Site
bootstrap:
  provisioning:
    interface: eno2
    address: 172.22.0.1/24
    dhcpRange: {start: 172.22.0.10, end: 172.22.0.100}
  dataDisk: /dev/vdb
cluster:
  name: test
hosts:
`)
	var pws []string
	for i := range n {
		role := "worker"
		if i == 0 {
			role = "master"
		}
		pw := fmt.Sprintf("S3cret-PW-%d-xyzzy", i)
		pws = append(pws, pw)
		bmc := fmt.Sprintf("ipmi://10.10.1.%d:623", i+1)
		if i%2 == 1 {
			bmc = fmt.Sprintf("redfish://10.10.1.%d/redfish/v1/Systems/1", i+1)
		}
		devices := "" // host-2, a worker, requires SR-IOV and QAT
		if i == 2 {
			devices = ", sriov: true, qat: true"
		}
		fmt.Fprintf(&b, `- name: host-%d
  role: %s
  bmc:
    address: %s
    credentials: {username: admin, password: %s}
  bootMACAddress: 52:54:00:00:02:%02x
  image: {url: "http://172.22.0.1:6180/images/os.qcow2", checksum: %s}
  requirements: {cpu: 4, memory: 8Gi%s}
`, i, role, bmc, pw, i, strings.Repeat("ab", 32), devices)
	}
	p := filepath.Join(dir, "site.yaml")
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return p, pws
}

// Against a real kube-apiserver with the manifests installed: the site step
// applies three hosts, keeps the SSH key 0600 in its folder, applies again
// with the same key and changes nothing, reports every host (with no
// operator, no state), and never logs a password or the private key.
func TestApplyTwiceAndWatch(t *testing.T) {
	env, kc := apiServer(t)
	ctx := context.Background()
	dir := t.TempDir()
	sitePath, pws := writeSite(t, dir, 3)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx = logctx.With(ctx, log)
	o := Options{Site: sitePath, KeyDir: filepath.Join(dir, "ssh"), AgeIdentity: filepath.Join(dir, "age", "identity.txt")}

	hosts, _, err := Apply(ctx, kc, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(hosts) != 3 || hosts[1].BMC != "redfish://10.10.1.2/redfish/v1/Systems/1" || hosts[2].MAC != "52:54:00:00:02:02" {
		t.Fatalf("hosts = %+v", hosts)
	}
	// What no device plugin on the stick serves: kept for status, and
	// said in the log.
	if len(hosts[1].Requires) != 0 || !slices.Equal(hosts[2].Requires, []string{site.DeviceSRIOV, site.DeviceQAT}) {
		t.Errorf("the hosts require %v and %v, want nothing and [sriov qat]", hosts[1].Requires, hosts[2].Requires)
	}
	for _, want := range []string{"host-2 requires SR-IOV (hosts[2].requirements.sriov): ", "host-2 requires QAT (hosts[2].requirements.qat): "} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log does not say %q", want)
		}
	}
	priv := filepath.Join(o.KeyDir, "id_ed25519")
	fi, err := os.Stat(priv)
	if err != nil {
		t.Fatalf("no private key on the data disk: %v", err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("private key mode %v, want 0600", fi.Mode().Perm())
	}
	key, _ := os.ReadFile(priv)

	states1, err := Follow(ctx, kc, FollowOptions{}) // no operator here: it returns at once
	if err != nil {
		t.Fatal(err)
	}
	if len(states1) != 3 {
		t.Fatalf("%d host states, want 3", len(states1))
	}
	rv := resourceVersions(t, ctx, env)

	if _, _, err := Apply(ctx, kc, o); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(priv); !bytes.Equal(again, key) {
		t.Error("the SSH key changed on the second apply")
	}
	if rv2 := resourceVersions(t, ctx, env); rv2 != rv {
		t.Errorf("a second apply changed objects:\n%s\n---\n%s", rv, rv2)
	}

	hostsFile := filepath.Join(dir, "hosts.json")
	if err := WriteHosts(hostsFile, hosts); err != nil {
		t.Fatal(err)
	}
	got, err := ReadHosts(hostsFile)
	if err != nil || len(got) != 3 {
		t.Fatalf("ReadHosts = %v, %v", got, err)
	}
	written, _ := os.ReadFile(hostsFile)
	for _, needle := range render.LeakNeedles(pws, key) {
		if strings.Contains(logs.String(), needle) {
			t.Errorf("a secret is in the log: %q", needle)
		}
		if strings.Contains(string(written), needle) {
			t.Errorf("a secret is in the hosts file: %q", needle)
		}
	}
}

func resourceVersions(t *testing.T, ctx context.Context, env *kubetest.Env) string {
	t.Helper()
	var b strings.Builder
	secrets, err := env.Client.CoreV1().Secrets(render.Namespace).List(ctx, metav1ListOptions())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets.Items {
		fmt.Fprintf(&b, "secret %s %s\n", s.Name, s.ResourceVersion)
	}
	kc, err := kube.New(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	states, err := hoststate.List(ctx, kc)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range states {
		fmt.Fprintf(&b, "bmh %s %s\n", h.Name, h.BootMACAddress)
	}
	return b.String()
}

func metav1ListOptions() metav1.ListOptions { return metav1.ListOptions{} }

func TestCountStates(t *testing.T) {
	got := CountStates([]hoststate.Host{{State: "registering", Error: "x"}, {State: "provisioned"}, {State: "registering"}, {State: ""}, {State: "inspecting"}})
	want := "hosts: 1 provisioned, 1 inspecting, 2 registering, 1 (none yet) (1 with an error: firstboot status)"
	if got != want {
		t.Errorf("CountStates = %q, want %q", got, want)
	}
	if got := CountStates(nil); got != "hosts: none" {
		t.Errorf("no hosts: %q", got)
	}
}

func TestStuckRegistering(t *testing.T) {
	long := time.Now().Add(-6 * time.Minute)
	for _, c := range []struct {
		h     hoststate.Host
		stuck bool
	}{
		{hoststate.Host{State: "registering", Since: long}, true},
		{hoststate.Host{State: "registering", Since: time.Now()}, false},
		{hoststate.Host{State: "registering", Since: long, Error: "x"}, false},
		{hoststate.Host{State: "registering", Since: long, ErrorCount: 1}, false},
		{hoststate.Host{State: "inspecting", Since: long}, false},
		{hoststate.Host{State: "registering"}, false},
	} {
		if got := StuckRegistering(c.h, RegisteringLimit); (got != "") != c.stuck || c.stuck && !strings.Contains(got, "no error reported") {
			t.Errorf("%+v: %q", c.h, got)
		}
	}
	if got := StuckRegistering(hoststate.Host{State: "registering", Since: long}, 0); got != "" {
		t.Errorf("no limit: %q", got)
	}
}

// Against a real kube-apiserver: with bootstrap.provisioningLimit 1, the
// site step applies the first host of three and holds the others with the
// baremetal-operator's paused annotation; applying again (a rerun) holds
// no released host again; Follow releases the next host, in the site's
// order, only when the one at work is provisioned, and ends once all are.
func TestProvisioningLimitReleasesInWaves(t *testing.T) {
	env, kc := apiServer(t)
	ctx := context.Background()
	dir := t.TempDir()
	sitePath, _ := writeSite(t, dir, 3)
	data, _ := os.ReadFile(sitePath)
	limited := strings.Replace(string(data), "  dataDisk: /dev/vdb\n", "  dataDisk: /dev/vdb\n  provisioningLimit: 1\n", 1)
	if err := os.WriteFile(sitePath, []byte(limited), 0o600); err != nil {
		t.Fatal(err)
	}
	o := Options{Site: sitePath, KeyDir: filepath.Join(dir, "ssh")}
	paused := func() map[string]string {
		t.Helper()
		hs, err := hoststate.List(ctx, kc)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, h := range hs {
			out[h.Name] = h.Paused
		}
		return out
	}
	want := map[string]string{"host-0": "", "host-1": HoldValue, "host-2": HoldValue}
	_, p, err := Apply(ctx, kc, o)
	if err != nil {
		t.Fatal(err)
	}
	if got := paused(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("paused annotations after the first apply: %v, want %v", got, want)
	}
	if got := CountStates(mustList(t, ctx, kc)); got != "hosts: 2 waiting, 1 (none yet)" {
		t.Errorf("CountStates = %q", got)
	}

	// The operator registers host-0; a rerun applies the site again.
	setState(t, ctx, env, "host-0", "registering")
	if _, p, err = Apply(ctx, kc, o); err != nil {
		t.Fatal(err)
	}
	if got := paused(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("paused annotations after a rerun: %v, want %v", got, want)
	}

	type result struct {
		states []hoststate.Host
		err    error
	}
	followed := make(chan result, 1)
	progress := make(chan string, 16)
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		s, err := Follow(fctx, kc, FollowOptions{Poll: 20 * time.Millisecond, NoOperator: time.Hour, ErrorSettle: time.Hour, Pacer: p,
			Progress: func(c string) { progress <- c }})
		followed <- result{s, err}
	}()
	// While host-0 is at work, nothing is released: Follow reports each
	// count after deciding what to release on the same look.
	for _, st := range []string{"registering", "inspecting"} {
		setState(t, ctx, env, "host-0", st)
		for c := <-progress; c != "hosts: 1 "+st+", 2 waiting"; c = <-progress {
		}
		if got := paused(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("released while host-0 was %s: %v", st, got)
		}
	}
	go func() { // Follow's later counts are not checked
		for range progress {
		}
	}()
	for _, n := range []string{"host-0", "host-1", "host-2"} {
		setState(t, ctx, env, n, "provisioned")
		want[n] = ""
		if next := map[string]string{"host-0": "host-1", "host-1": "host-2"}[n]; next != "" {
			want[next] = ""
			waitFor(t, func() bool { return paused()[next] == "" })
			if got := paused(); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("after %s was provisioned: %v, want %v", n, got, want)
			}
			setState(t, ctx, env, next, "inspecting")
		}
	}
	r := <-followed
	if r.err != nil || len(r.states) != 3 || len(p.Held()) != 0 {
		t.Fatalf("Follow = %v, %v; still held %v", r.states, r.err, p.Held())
	}
}

func mustList(t *testing.T, ctx context.Context, kc *kube.Client) []hoststate.Host {
	t.Helper()
	hs, err := hoststate.List(ctx, kc)
	if err != nil {
		t.Fatal(err)
	}
	return hs
}

// setState writes a BareMetalHost's provisioning state as the operator
// does, through the status subresource.
func setState(t *testing.T, ctx context.Context, env *kubetest.Env, name, state string) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	patch := fmt.Sprintf(`{"status":{"errorCount":0,"errorMessage":"","operationalStatus":"OK","poweredOn":true,"provisioning":{"ID":"id-%s","state":%q}}}`, name, state)
	if _, err := dyn.Resource(metal3.GroupVersion.WithResource("baremetalhosts")).Namespace(render.Namespace).
		Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatalf("setting %s %s: %v", name, state, err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 30 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Against a real kube-apiserver: Prune deletes the BareMetalHost of a host
// the site no longer names and keeps its Secrets while the operator's
// finalizer deprovisions it (it reads the BMC credentials and network data
// for that); Follow, told the host is removed, ends once it is gone; the
// next Prune deletes its Secrets; the other hosts' objects stay.
func TestPruneRemoveHostAfterDeprovisioning(t *testing.T) {
	env, kc := apiServer(t)
	ctx := context.Background()
	dir := t.TempDir()
	sitePath, _ := writeSite(t, dir, 3)
	if _, _, err := Apply(ctx, kc, Options{Site: sitePath, KeyDir: filepath.Join(dir, "ssh")}); err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	bmhs := dyn.Resource(metal3.GroupVersion.WithResource("baremetalhosts")).Namespace(render.Namespace)
	finalizers := func(list string) {
		t.Helper()
		if _, err := bmhs.Patch(ctx, "host-2", types.MergePatchType, []byte(`{"metadata":{"finalizers":`+list+`}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	finalizers(`["` + metal3.BareMetalHostFinalizer + `"]`) // as the operator puts it
	setState(t, ctx, env, "host-0", "provisioned")
	setState(t, ctx, env, "host-1", "provisioned")
	secrets := func() string {
		t.Helper()
		list, err := env.Client.CoreV1().Secrets(render.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, s := range list.Items {
			out = append(out, s.Name)
		}
		return strings.Join(out, " ")
	}
	keep := []string{"host-0", "host-1"}
	removed, err := Prune(ctx, kc, "test", keep)
	if err != nil || fmt.Sprint(removed) != "[{host-2 true }]" {
		t.Fatalf("Prune = %v, %v", removed, err)
	}
	if got, _ := bmhs.Get(ctx, "host-2", metav1.GetOptions{}); got == nil || got.GetDeletionTimestamp() == nil {
		t.Fatalf("host-2's BareMetalHost is not being deleted: %v", got)
	}
	want := "bootstick-ssh-key host-0-bmc-secret host-0-user-data host-1-bmc-secret host-1-user-data host-2-bmc-secret host-2-user-data"
	if got := secrets(); got != want {
		t.Fatalf("Secrets while host-2 is deprovisioned: %s, want %s", got, want)
	}

	followed := make(chan error, 1)
	progress := make(chan string, 16)
	go func() {
		_, err := Follow(ctx, kc, FollowOptions{Poll: 20 * time.Millisecond, NoOperator: time.Hour, ErrorSettle: time.Hour,
			Hosts: keep, Removed: []string{"host-2"}, Progress: func(c string) { progress <- c }})
		followed <- err
	}()
	// host-2 (no state: a host held back is deleted so) keeps Follow
	// going until it is gone.
	for c := <-progress; c != "hosts: 2 provisioned, 1 (none yet)"; c = <-progress {
	}
	select {
	case err := <-followed:
		t.Fatalf("Follow ended while host-2 was still there: %v", err)
	default:
	}
	finalizers(`null`) // deprovisioned
	if err := <-followed; err != nil {
		t.Fatal(err)
	}
	removed, err = Prune(ctx, kc, "test", keep)
	if err != nil || fmt.Sprint(removed) != "[{host-2 false }]" {
		t.Fatalf("Prune again = %v, %v", removed, err)
	}
	if got, want := secrets(), "bootstick-ssh-key host-0-bmc-secret host-0-user-data host-1-bmc-secret host-1-user-data"; got != want {
		t.Fatalf("Secrets after host-2 is gone: %s, want %s", got, want)
	}
	if removed, err := Prune(ctx, kc, "test", keep); err != nil || len(removed) != 0 {
		t.Fatalf("a third Prune = %v, %v", removed, err)
	}
}

// apiServer starts a real etcd and kube-apiserver from the toolchain with
// the stick's manifests (the CRDs) applied.
func apiServer(t *testing.T) (*kubetest.Env, *kube.Client) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a real etcd and kube-apiserver from the toolchain")
	}
	env := kubetest.Start(t)
	kc, err := kube.New(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	if err := kc.ApplyFS(context.Background(), manifests.FS, manifests.Files()); err != nil {
		t.Fatal(err)
	}
	return env, kc
}
