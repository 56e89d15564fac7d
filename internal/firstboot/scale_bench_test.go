package firstboot

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bootstick/bootstick/internal/benchtable"
	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/command"
	"github.com/bootstick/bootstick/internal/hoststate"
	"github.com/bootstick/bootstick/internal/kube"
	"github.com/bootstick/bootstick/internal/pipeline"
	"github.com/bootstick/bootstick/internal/render"
	"github.com/bootstick/bootstick/internal/vsite"
)

// ironicAPI talks to the appliance's Ironic as BMO does (its credentials,
// HTTP basic auth).
type ironicAPI struct {
	base, user, password string
	client               *http.Client
	// version is the API version asked for; 1.95 (what BMO v0.13.2 asks
	// for of Ironic 29) when empty.
	version string
}

// do calls the API at a's version, or at the base version when path is
// the ramdisk's /v1/continue_inspection (as the ramdisk calls it).
func (a *ironicAPI) do(ctx context.Context, method, path string, body any, out any) error {
	var r io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return err
		}
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, r)
	if err != nil {
		return err
	}
	req.SetBasicAuth(a.user, a.password)
	req.Header.Set("Content-Type", "application/json")
	if path != "/v1/continue_inspection" {
		v := a.version
		if v == "" {
			v = "1.95"
		}
		req.Header.Set("X-OpenStack-Ironic-API-Version", v)
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%s %s: %s: %.300s", method, path, resp.Status, data)
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

// fakeAgent answers for every node Ironic waits on in inspection, as the
// deploy ramdisk would: it posts an inventory (one NIC with the node's
// boot MAC, 2 CPUs, 8 GiB, one 20 GiB disk) to /v1/continue_inspection.
// It polls until ctx ends and returns how many nodes it answered.
func fakeAgent(ctx context.Context, a *ironicAPI, macs map[string]string) <-chan int {
	done := make(chan int, 1)
	go func() {
		answered := map[string]bool{}
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			var list struct {
				Nodes []struct{ UUID, Name string } `json:"nodes"`
			}
			if err := a.do(ctx, http.MethodGet, "/v1/nodes?provision_state=inspect%20wait&fields=uuid,name", nil, &list); err == nil {
				for _, n := range list.Nodes {
					mac := macs[strings.TrimPrefix(n.Name, "metal3~")]
					if answered[n.UUID] || mac == "" {
						continue
					}
					inv := map[string]any{
						"inventory": map[string]any{
							"interfaces": []map[string]any{{"name": "eth0", "mac_address": mac, "ipv4_address": "172.22.1.1", "has_carrier": true}},
							"cpu":        map[string]any{"model_name": "fake", "count": 2, "architecture": "x86_64", "flags": []string{}},
							"memory":     map[string]any{"total": 8 << 30, "physical_mb": 8192},
							"disks": []map[string]any{{"name": "/dev/vda", "model": "fake", "size": 20 << 30, "rotational": false,
								"serial": "fake-" + n.UUID[:8], "vendor": "bootstick", "wwn": nil, "hctl": nil, "by_path": "/dev/disk/by-path/fake"}},
							"system_vendor": map[string]any{"product_name": "fake", "serial_number": n.UUID[:8], "manufacturer": "bootstick"},
							"boot":          map[string]any{"current_boot_mode": "bios", "pxe_interface": mac},
							"bmc_address":   "0.0.0.0",
							"hostname":      "fake",
						},
					}
					if err := a.do(ctx, http.MethodPost, "/v1/continue_inspection", inv, nil); err == nil {
						answered[n.UUID] = true
					}
				}
			}
			select {
			case <-ctx.Done():
				done <- len(answered)
				return
			case <-tick.C:
			}
		}
	}()
	return done
}

// cpuBusy reads the busy and total jiffies of all CPUs from /proc/stat.
func cpuBusy() (busy, total uint64) {
	data, _ := os.ReadFile("/proc/stat")
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	for i, v := range f[1:] {
		n, _ := strconv.ParseUint(v, 10, 64)
		total += n
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy, total
}

// scaleResult is one scenario's figures.
type scaleResult struct {
	siteStep time.Duration
	states   map[string][]time.Duration // per state, one per host
	busy     float64                    // CPU busy share while the site step ran
	agent    int
}

func quantiles(d []time.Duration) (median, max time.Duration) {
	if len(d) == 0 {
		return 0, 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2], s[len(s)-1]
}

// scaleRun provisions n fake hosts: the appliance comes up in host mode
// with a site of n hosts and is killed as the site step starts; Ironic
// gets one fake-hardware node per host (fake power, boot and deploy,
// agent inspection answered by fakeAgent) under the name BMO looks for,
// BMO gets env, and the next run's site step creates the BareMetalHosts
// and follows them until every one is provisioned.
func scaleRun(b *testing.B, h *hostRun, vs *vsite.Site, n int, env map[string]string) scaleResult {
	ctx := context.Background()
	p := defaultPaths(h.data)
	var hosts []vsite.SiteHost
	macs := map[string]string{}
	for i := range n {
		name := fmt.Sprintf("fake-%03d", i)
		mac := fmt.Sprintf("52:54:00:fa:%02x:%02x", i/256, i%256)
		macs[name] = mac
		hosts = append(hosts, vsite.SiteHost{Machine: name, Role: map[bool]string{true: "master", false: "worker"}[i == 0],
			BMCAddress: fmt.Sprintf("ipmi://172.22.0.2:%d", 7000+i), BMCPassword: "fake-bmc-password", BootMAC: mac})
	}
	// A bare toolchain layout names no bundled images: the image by URL,
	// as Ironic's web server serves it (the fake deploy never fetches it).
	sum, _, err := cas.HashFile(filepath.Join(h.tc, "files", "debian-13-compute.qcow2"))
	if err != nil {
		b.Fatal(err)
	}
	sitePath := writeSite(b, vs, vsite.SiteConfig{Cluster: "scale", Hosts: hosts,
		// An address for every host's deploy ramdisk, as validate asks.
		DHCPStart: netip.MustParseAddr("172.22.0.10"), DHCPEnd: netip.MustParseAddr("172.22.0.250"),
		Image: vsite.SiteImage{
			URL:      fmt.Sprintf("http://%s:%d/images/debian-13-compute.qcow2", m3Address, render.ImagePort),
			Checksum: sum.Hex(), Format: "qcow2"}})
	runToSite(b, h, h.tc+"/oci", sitePath)
	c, err := kube.Load(adminConf)
	if err != nil {
		b.Fatal(err)
	}
	api := ironicAsBMO(b, ctx, c)
	if len(env) > 0 {
		cm, err := c.CS.CoreV1().ConfigMaps(render.BMONamespace).Get(ctx, render.BMOConfig, metav1.GetOptions{})
		if err != nil {
			b.Fatal(err)
		}
		for k, v := range env {
			cm.Data[k] = v
		}
		if _, err := c.CS.CoreV1().ConfigMaps(render.BMONamespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
		if err := c.CS.CoreV1().Pods(render.BMONamespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			b.Fatal(err)
		}
		if err := c.WaitDeployment(ctx, render.BMONamespace, "baremetal-operator", 5*time.Minute); err != nil {
			b.Fatal(err)
		}
	}
	for name := range macs {
		createFakeNode(b, ctx, api, name, nil)
	}
	actx, stopAgent := context.WithCancel(ctx)
	answered := fakeAgent(actx, api, macs)

	busy0, total0 := cpuBusy()
	out := runToEnd(b, h, h.tc+"/oci", sitePath)
	busy1, total1 := cpuBusy()
	stopAgent()
	res := scaleResult{states: map[string][]time.Duration{}, agent: <-answered,
		busy: float64(busy1-busy0) / float64(total1-total0)}
	st, err := pipeline.LoadState(pipeline.StatePath(p.State))
	if err != nil {
		b.Fatal(err)
	}
	res.siteStep = st.Step("site").Duration
	states, err := hoststate.List(ctx, c)
	if err != nil {
		b.Fatal(err)
	}
	for _, s := range states {
		if s.State != "provisioned" {
			b.Fatalf("host %s is %s after the run:\n%s", s.Name, s.State, command.Tail(out, 20))
		}
		hist := s.History
		add := func(state string, from, to metav1.Time) {
			if !from.IsZero() && !to.IsZero() {
				res.states[state] = append(res.states[state], to.Sub(from.Time))
			}
		}
		add("registering", hist.Register.Start, hist.Register.End)
		add("inspecting", hist.Inspect.Start, hist.Inspect.End)
		add("available and preparing", hist.Inspect.End, hist.Provision.Start)
		add("provisioning", hist.Provision.Start, hist.Provision.End)
		add("whole host", hist.Register.Start, hist.Provision.End)
	}
	if len(states) != n {
		b.Fatalf("%d BareMetalHosts, want %d", len(states), n)
	}
	return res
}

// BenchmarkProvisioningScale sends 10 and then 100 hosts through the real
// baremetal-operator and Ironic of host mode, from the site step to
// provisioned, with the hardware faked below Ironic (its fake-hardware
// driver, and a fake agent answering inspection); then 100 again with
// BMO's provisioning limit and concurrency raised. It reports the site step's time against the seed's
// goal (a 10-server site in 10 minutes), the per-host cost, and each
// state's median and longest time per host.
func BenchmarkProvisioningScale(b *testing.B) {
	tc := toolchainDir(b)
	h := newHostRun(b, tc)
	vs := startSite(b, context.Background(), nil)
	reset := func() {
		if out, err := h.cmd("reset", "--data", h.data).CombinedOutput(); err != nil {
			b.Fatalf("reset: %v\n%s", err, out)
		}
	}
	scenarios := []struct {
		name  string
		hosts int
		env   map[string]string
	}{
		{"10 hosts", 10, nil},
		{"100 hosts", 100, nil},
		// Both of BMO's limits raised in one run (each 100-host run costs
		// four minutes of the bench's twenty).
		{"100 hosts, PROVISIONING_LIMIT=100 BMO_CONCURRENCY=8", 100, map[string]string{"PROVISIONING_LIMIT": "100", "BMO_CONCURRENCY": "8"}},
	}
	var perHost10 float64
	for i, sc := range scenarios {
		b.Run(strings.NewReplacer(" ", "_", ",", "").Replace(sc.name), func(b *testing.B) {
			if i > 0 {
				reset()
			}
			r := scaleRun(b, h, vs, sc.hosts, sc.env)
			perHost := r.siteStep.Seconds() / float64(sc.hosts)
			if sc.hosts == 10 && sc.env == nil {
				perHost10 = perHost
			}
			what := fmt.Sprintf("%d BareMetalHosts from the site step to provisioned through the real baremetal-operator v0.13.2 and Ironic 29 of host mode (PROVISIONING_LIMIT %s, BMO_CONCURRENCY %s), hardware faked below Ironic: fake-hardware nodes (fake power, boot and deploy) with agent inspection answered by a fake agent; CPU %.0f%% busy on %d cores while the site step ran; the fake agent answered %d inspections",
				sc.hosts, or(sc.env["PROVISIONING_LIMIT"], "20 (default)"), or(sc.env["BMO_CONCURRENCY"], "2 (default: the CPUs)"), 100*r.busy, runtime.NumCPU(), r.agent)
			row := benchtable.Row{Group: "scale", Name: sc.name + ": site step",
				Ours:   benchtable.Side{Name: "all provisioned", Value: r.siteStep.Seconds(), Unit: "s"},
				Better: "lower", What: what}
			switch {
			case sc.hosts == 10:
				row.Ref = benchtable.Side{Name: "seed's goal", Value: 600, Unit: "s"}
				row.Goal, row.Met = benchtable.Goal(r.siteStep.Seconds()/600, "lower", 1)
			case perHost10 > 0:
				row.Ref = benchtable.Side{Name: "10 hosts' time per host ×" + strconv.Itoa(sc.hosts), Value: perHost10 * float64(sc.hosts), Unit: "s"}
			}
			benchtable.Record(b, row)
			for _, state := range []string{"registering", "inspecting", "available and preparing", "provisioning", "whole host"} {
				med, max := quantiles(r.states[state])
				benchtable.Record(b, benchtable.Row{Group: "scale", Name: sc.name + ": " + state,
					Ours: benchtable.Side{Name: "median", Value: med.Seconds(), Unit: "s"},
					Ref:  benchtable.Side{Name: "max", Value: max.Seconds(), Unit: "s"},
					What: what})
			}
			b.Logf("%s: site step %s, %.1f s per host, CPU %.0f%% busy", sc.name, r.siteStep.Round(time.Second), perHost, 100*r.busy)
		})
	}
}

func or(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// runToSite runs firstboot in host mode from bundle (a stick's ISO or an
// OCI layout) with the site up to its site step
// (held there by the test-only pause) and kills it there: the cluster,
// Ironic and BMO run, and no BareMetalHost exists yet.
func runToSite(t testing.TB, h *hostRun, bundle, sitePath string) {
	t.Helper()
	cmd := h.cmd("run", "--mode", "host", "--bundle", bundle, "--data", h.data, "--site", sitePath)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Env = append(cmd.Env, "BOOTSTICK_TEST_PAUSE_STEP=site")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	statePath := pipeline.StatePath(defaultPaths(h.data).State)
	for {
		if st, err := pipeline.LoadState(statePath); err == nil {
			if r := st.Step("site"); r != nil && r.State == pipeline.StateRunning {
				break
			}
		}
		select {
		case err := <-exited:
			t.Fatalf("firstboot exited before the site step: %v\n%s", err, command.Tail(out.String(), 40))
		case <-time.After(100 * time.Millisecond): // polling the state file for the step
		}
	}
	cmd.Process.Signal(syscall.SIGKILL)
	<-exited
}

// runToEnd runs firstboot in host mode from bundle with the site to its
// end and returns what it printed.
func runToEnd(t testing.TB, h *hostRun, bundle, sitePath string) string {
	t.Helper()
	out, err := h.cmd("run", "--mode", "host", "--bundle", bundle, "--data", h.data, "--site", sitePath).CombinedOutput()
	if err != nil {
		t.Fatalf("firstboot run: %v\n%s", err, command.Tail(string(out), 40))
	}
	return string(out)
}

// ironicAsBMO is the appliance's Ironic API with the baremetal-operator's
// credentials (the Secret firstboot made).
func ironicAsBMO(t testing.TB, ctx context.Context, c *kube.Client) *ironicAPI {
	t.Helper()
	api, err := ironicAdmin(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	return api
}

// ironicAdmin is ironicAsBMO's client, or why there is none yet.
func ironicAdmin(ctx context.Context, c *kube.Client) (*ironicAPI, error) {
	cred, err := c.CS.CoreV1().Secrets(render.BMONamespace).Get(ctx, render.IronicCredentials, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("BMO's Ironic credentials: %w", err)
	}
	client, err := provisioningClient(ctx, c)
	if err != nil {
		return nil, err
	}
	return &ironicAPI{base: fmt.Sprintf("https://%s:%d", m3Address, render.IronicAPIPort), user: string(cred.Data["username"]),
		password: string(cred.Data["password"]), client: client}, nil
}

// createFakeNode enrolls host name in Ironic under the name BMO looks up
// (metal3~NAME) with fake power, boot and deploy, and agent inspection;
// extra sets more of the node's fields. It returns the node's UUID.
func createFakeNode(t testing.TB, ctx context.Context, api *ironicAPI, name string, extra map[string]any) string {
	t.Helper()
	node := map[string]any{
		"name": "metal3~" + name, "driver": "fake-hardware",
		"boot_interface": "fake", "deploy_interface": "fake", "management_interface": "fake",
		"power_interface": "fake", "inspect_interface": "agent",
		"driver_info": map[string]any{"ipmi_address": "172.22.0.2"},
	}
	for k, v := range extra {
		node[k] = v
	}
	var created struct{ UUID string }
	if err := api.do(ctx, http.MethodPost, "/v1/nodes", node, &created); err != nil {
		t.Fatalf("creating the fake node of %s: %v", name, err)
	}
	return created.UUID
}
