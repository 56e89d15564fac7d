package firstboot

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metal3 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	"golang.org/x/crypto/ssh"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/command"
	"github.com/bootstick/bootstick/internal/hoststate"
	"github.com/bootstick/bootstick/internal/kube"
	"github.com/bootstick/bootstick/internal/kubeadm"
	"github.com/bootstick/bootstick/internal/render"
	"github.com/bootstick/bootstick/internal/sshkeys"
	"github.com/bootstick/bootstick/internal/testctx"
	"github.com/bootstick/bootstick/internal/vsite"
)

// The virtual site of the provisioning test: this machine's end of the
// veth (bsprov0, 172.22.0.1), the BMCs and the machines in a network
// namespace the test makes (internal/vsite).
const (
	m3Netns   = "bootstick-test-prov"
	m3Iface   = "bsprov0"
	m3Address = "172.22.0.1"
	m3BMC     = "172.22.0.2"
)

// startSite starts the test's virtual site (internal/vsite) with machines,
// and closes it when the test ends.
func startSite(t testing.TB, ctx context.Context, machines []vsite.Machine) *vsite.Site {
	t.Helper()
	vs, err := vsite.Start(ctx, vsite.Options{
		Dir: t.TempDir(), Netns: m3Netns, HostIface: m3Iface,
		Network: netip.MustParsePrefix("172.22.0.0/24"), HostAddr: netip.MustParseAddr(m3Address), BMCAddr: netip.MustParseAddr(m3BMC),
		Machines: machines,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := vs.Close(); err != nil {
			t.Error(err)
		}
	})
	return vs
}

// writeSite writes the site file of c (with the test's DHCP range unless
// c has one) and
// returns its path.
func writeSite(t testing.TB, vs *vsite.Site, c vsite.SiteConfig) string {
	t.Helper()
	return writeSiteIn(t, vs, t.TempDir(), c)
}

// writeSiteBeside is writeSite with the BMC CA in a file beside the site
// (bmc-ca.pem), as a stick's site names it: firstboot site apply keeps a
// site with the files it names, and refuses one that names a file
// outside its folder. Each call writes a folder of its own.
func writeSiteBeside(t testing.TB, vs *vsite.Site, c vsite.SiteConfig) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "bmc-ca.pem"), vs.BMCCA(), 0o644); err != nil {
		t.Fatal(err)
	}
	c.BMCCAFile = "bmc-ca.pem"
	return writeSiteIn(t, vs, dir, c)
}

// writeSiteIn writes the site file of c into dir as site.yaml.
func writeSiteIn(t testing.TB, vs *vsite.Site, dir string, c vsite.SiteConfig) string {
	t.Helper()
	if !c.DHCPStart.IsValid() {
		c.DHCPStart, c.DHCPEnd = netip.MustParseAddr("172.22.0.10"), netip.MustParseAddr("172.22.0.40")
	}
	data, err := vs.SiteFile(c)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "site.yaml")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// hostWatch keeps the last states read of the BareMetalHosts.
type hostWatch struct{ last map[string]hoststate.Host }

// look reads the hosts' states; on a failed read, the last ones stay.
func (w *hostWatch) look(ctx context.Context, c *kube.Client) map[string]hoststate.Host {
	if c == nil {
		return w.last
	}
	if states, err := hoststate.List(ctx, c); err == nil {
		for _, s := range states {
			w.last[s.Name] = s
		}
	}
	return w.last
}

// historyTable logs a host's time in each state from the operator's
// operation history, and fails unless the host went registering →
// inspecting → available → provisioning → provisioned in that order.
func historyTable(t *testing.T, name string, h metal3.OperationHistory) {
	t.Helper()
	rows := []struct {
		state      string
		start, end time.Time
	}{
		{"registering", h.Register.Start.Time, h.Register.End.Time},
		{"inspecting", h.Inspect.Start.Time, h.Inspect.End.Time},
		{"available", h.Inspect.End.Time, h.Provision.Start.Time},
		{"provisioning", h.Provision.Start.Time, h.Provision.End.Time},
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s's time in each state (the baremetal-operator's operation history):\n  %-14s %10s\n", name, "STATE", "FOR")
	prev := rows[0].start
	for _, r := range rows {
		if r.start.IsZero() || r.end.IsZero() || r.end.Before(r.start) || r.start.Before(prev) {
			t.Errorf("%s did not go through %s in order: %v to %v (history %+v)", name, r.state, r.start, r.end, h)
		}
		prev = r.end
		fmt.Fprintf(&b, "  %-14s %10s\n", r.state, r.end.Sub(r.start).Round(time.Second))
	}
	fmt.Fprintf(&b, "  %-14s %10s\n", "registering to provisioned", h.Provision.End.Sub(h.Register.Start.Time).Round(time.Second))
	t.Log(b.String())
}

// waitFor polls cond every 2 s until it holds; what names the wait. It
// gives up after timeout or when ctx ends (the test's deadline, from
// testctx), whichever comes first, and fails in words: how long it waited
// and why it stopped, cond's last word, and the tails of Ironic's and
// BMO's logs.
func waitFor(t *testing.T, ctx context.Context, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	waitForThen(t, ctx, timeout, what, cond, metal3Logs)
}

// checkLeaderElection checks that each controller's Lease (namespace/name)
// lasts what kubeadm.LeaderElectionLeaseDuration says, so that a slow API
// server does not restart the controller.
func checkLeaderElection(t *testing.T, ctx context.Context, cs kubernetes.Interface, leases ...string) {
	t.Helper()
	want := int32(kubeadm.LeaderElectionLeaseDuration / time.Second)
	ok := true
	for _, l := range leases {
		ns, name, _ := strings.Cut(l, "/")
		lease, err := cs.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
		switch {
		case err != nil:
			t.Errorf("the leader Lease %s: %v", l, err)
		case lease.Spec.LeaseDurationSeconds == nil:
			t.Errorf("the leader Lease %s names no duration, want %d s", l, want)
		case *lease.Spec.LeaseDurationSeconds != want:
			t.Errorf("the leader Lease %s lasts %d s, want %d s", l, *lease.Spec.LeaseDurationSeconds, want)
		default:
			continue
		}
		ok = false
	}
	if ok {
		t.Logf("the leader Leases last %d s: %s", want, strings.Join(leases, ", "))
	}
}

// metal3Logs are the last lines of Ironic's and BMO's logs.
func metal3Logs() string {
	return "Ironic:\n" + command.Tail(ironicLog(), 25) + "\nBMO:\n" + command.Tail(podLog(render.BMONamespace, "deploy/baremetal-operator", ""), 25)
}

// waitForThen is waitFor with the logs a failure shows.
func waitForThen(t *testing.T, ctx context.Context, timeout time.Duration, what string, cond func() (bool, string), logs func() string) {
	t.Helper()
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		ok, last := cond()
		if ok {
			return
		}
		select {
		case <-wctx.Done():
			why := fmt.Sprintf("its limit is %s", timeout)
			if ctx.Err() != nil {
				why = "the test's own deadline came first (testctx: go test's -timeout is near)"
			}
			t.Fatalf("gave up waiting for %s after %s: %s\nlast: %s\n%s", what, time.Since(start).Round(time.Second), why, last, logs())
		case <-tick.C:
		}
	}
}

// sshRun logs in to the host as root with firstboot's key (the user data
// keeps root's login open), accepting only the host key firstboot made for
// the host (cloud-init installs it from the user data), and returns what
// each of cmds printed.
func sshRun(t *testing.T, ctx context.Context, data, name, ip, serial string, cmds ...string) []string {
	t.Helper()
	var client *ssh.Client
	var lastErr error
	waitFor(t, ctx, 15*time.Minute, "an SSH login to "+ip, func() (bool, string) {
		client, lastErr = sshDial(data, name, ip)
		if lastErr != nil {
			serialLog, _ := os.ReadFile(serial)
			return false, lastErr.Error() + "\nconsole:\n" + command.Tail(string(serialLog), 20)
		}
		return true, ""
	})
	defer client.Close()
	run := func(cmd string) string {
		out, err := sshOutput(client, cmd)
		if err != nil {
			t.Fatalf("ssh %s %q: %v\n%s", ip, cmd, err, out)
		}
		return out
	}
	var outs []string
	for _, c := range cmds {
		outs = append(outs, run(c))
	}
	return outs
}

// sshDial logs in to the host as root with firstboot's key, accepting only
// the host key firstboot made for it.
func sshDial(data, name, ip string) (*ssh.Client, error) {
	keyPEM, err := os.ReadFile(filepath.Join(data, "ssh", sshkeys.PrivateKeyFile))
	if err != nil {
		return nil, err
	}
	signer, err := ssh.ParsePrivateKey(keyPEM)
	if err != nil {
		return nil, err
	}
	hostPub, err := os.ReadFile(filepath.Join(data, "ssh", sshkeys.HostKeysDir, name, sshkeys.PublicKeyFile))
	if err != nil {
		return nil, err
	}
	hostKey, _, _, _, err := ssh.ParseAuthorizedKey(hostPub)
	if err != nil {
		return nil, err
	}
	cfg := &ssh.ClientConfig{User: "root", Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: ssh.FixedHostKey(hostKey), HostKeyAlgorithms: []string{hostKey.Type()}, Timeout: 10 * time.Second}
	return ssh.Dial("tcp", net.JoinHostPort(ip, "22"), cfg)
}

// sshOutput runs cmd in a new session and returns its standard output.
func sshOutput(client *ssh.Client, cmd string) (string, error) {
	sess, err := client.NewSession()
	if err != nil {
		return "", err
	}
	defer sess.Close()
	var stdout, stderr strings.Builder
	sess.Stdout, sess.Stderr = &stdout, &stderr
	if err := sess.Run(cmd); err != nil {
		return stdout.String(), fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(stdout.String()), nil
}

// ironicMaxVersion is the newest API version Ironic offers.
func ironicMaxVersion(t *testing.T) string {
	t.Helper()
	c, err := kube.Load(adminConf)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := ironicHTTPS(t, c).Get(fmt.Sprintf("https://%s:%d/", m3Address, render.IronicAPIPort))
	if err != nil {
		t.Fatalf("Ironic's API: %v", err)
	}
	defer resp.Body.Close()
	var root struct {
		DefaultVersion struct {
			Version string `json:"version"`
		} `json:"default_version"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&root); err != nil {
		t.Fatalf("Ironic's API root: %v", err)
	}
	return root.DefaultVersion.Version
}

// ironicHTTPS is a client of Ironic's API as BMO is one: it trusts the
// provisioning CA alone (the ConfigMap firstboot gave BMO, read with c).
func ironicHTTPS(t testing.TB, c *kube.Client) *http.Client {
	t.Helper()
	client, err := provisioningClient(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// provisioningClient is ironicHTTPS's client, or why there is none yet.
func provisioningClient(ctx context.Context, c *kube.Client) (*http.Client, error) {
	cm, err := c.CS.CoreV1().ConfigMaps(render.BMONamespace).Get(ctx, render.BMOIronicCA, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("the provisioning CA BMO trusts: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(cm.Data["ca.crt"])) {
		return nil, fmt.Errorf("ConfigMap %s/%s holds no PEM certificate", render.BMONamespace, render.BMOIronicCA)
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}, nil
}

func ironicLog() string {
	return podLog(render.IronicNamespace, "deploy/ironic", "ironic")
}

// podLog is a workload's log (kubectl logs), of one container when
// container is set, with more of kubectl's flags (--previous). It gives
// up after 30 s: a failing test's cluster may not answer.
func podLog(ns, what, container string, flags ...string) string {
	args := append([]string{"--kubeconfig", adminConf, "--request-timeout", "30s", "-n", ns, "logs", what}, flags...)
	if container != "" {
		args = append(args, "-c", container)
	}
	out, _ := exec.Command(filepath.Join(cas.DefaultRoot(), "toolchain", "current", "bin", "kubectl"), args...).CombinedOutput()
	return string(out)
}

func randomHex(t *testing.T, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// newHostRun takes the host-mode lock, builds firstboot, and resets the
// machine (checking nothing is left) when the test ends.
func newHostRun(t testing.TB, tc string) *hostRun {
	t.Helper()
	hostModeLock(t)
	h := &hostRun{t: t, bin: buildFirstboot(t), tc: tc, data: "/var/lib/bootstick-test"}
	ctx, cancel := context.WithCancel(context.Background()) // a benchmark (testing.B) has no deadline
	if tt, ok := t.(testctx.T); ok {
		cancel()
		ctx, cancel = testctx.New(tt, 24*time.Hour)
	}
	h.ctx = ctx
	t.Cleanup(func() {
		cancel()
		// The reset has a context of its own: the test's has ended. It
		// fits in testctx.Reserve.
		rctx, rcancel := context.WithTimeout(context.Background(), testctx.Reserve-time.Minute)
		defer rcancel()
		out, err := firstbootCmd(rctx, h.bin, "reset", "--data", h.data).CombinedOutput()
		if err != nil {
			t.Errorf("reset: %v\n%s", err, out)
		}
		checkNothingLeft(t, h.data)
	})
	return h
}

// hostModeLock holds the machine-wide lock of the host-mode tests: one
// host-mode node per machine.
func hostModeLock(t testing.TB) {
	t.Helper()
	lockf, err := os.OpenFile("/run/bootstick-hostmode-test.lock", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lockf.Close() }) // after the reset: cleanups run last-in first-out
	if err := syscall.Flock(int(lockf.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
}

// buildFirstboot builds firstboot (with the test-only hooks) for a test.
func buildFirstboot(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "firstboot")
	if out, err := exec.Command("go", "build", "-tags", "bootsticktest", "-o", bin, "github.com/bootstick/bootstick/cmd/firstboot").CombinedOutput(); err != nil {
		t.Fatalf("building firstboot: %v\n%s", err, out)
	}
	return bin
}
