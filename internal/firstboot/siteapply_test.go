package firstboot

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

	metal3 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	bpa "github.com/bootstick/bootstick/internal/bpa/v1alpha1"
	"github.com/bootstick/bootstick/internal/dhcphosts"
	"github.com/bootstick/bootstick/internal/hoststate"
	"github.com/bootstick/bootstick/internal/kube"
	"github.com/bootstick/bootstick/internal/kubetest"
	"github.com/bootstick/bootstick/internal/logctx"
	"github.com/bootstick/bootstick/internal/pipeline"
	"github.com/bootstick/bootstick/internal/render"
	"github.com/bootstick/bootstick/internal/sitestep"
	"github.com/bootstick/bootstick/manifests"
)

// writeApplySite writes a site of the numbered hosts (host-0 the master)
// into dir, with bootstrap.provisioningLimit 1, and returns its path and
// the hosts' BMC passwords. host-3's credentials are in a file beside it.
// edit changes the text before it is written.
func writeApplySite(t *testing.T, dir string, hosts []int, edit func(string) string) (string, []string) {
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
  provisioningLimit: 1
cluster:
  name: test
hosts:
`)
	var pws []string
	for _, i := range hosts {
		role := "worker"
		if i == 0 {
			role = "master"
		}
		pw := fmt.Sprintf("S3cret-PW-%d-xyzzy", i)
		pws = append(pws, pw)
		creds := fmt.Sprintf("{username: admin, password: %s}", pw)
		if i == 3 {
			if err := os.MkdirAll(filepath.Join(dir, "creds"), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "creds", "host-3.yaml"), []byte("username: admin\npassword: "+pw+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			creds = "{file: creds/host-3.yaml}"
		}
		fmt.Fprintf(&b, `- name: host-%d
  role: %s
  bmc:
    address: ipmi://10.10.1.%d:623
    credentials: %s
  bootMACAddress: 52:54:00:00:02:%02x
  image: {url: "http://172.22.0.1:6180/images/os.qcow2", checksum: %s}
`, i, role, i+1, creds, i, strings.Repeat("ab", 32))
	}
	text := b.String()
	if edit != nil {
		text = edit(text)
	}
	p := filepath.Join(dir, "site.yaml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p, pws
}

// objectVersions are the resourceVersions of the site namespace's
// Secrets, BareMetalHosts and Provisionings, by kind/name.
func objectVersions(t *testing.T, ctx context.Context, kc *kube.Client) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, gvr := range []schema.GroupVersionResource{{Version: "v1", Resource: "secrets"},
		metal3.GroupVersion.WithResource("baremetalhosts"), bpa.GroupVersion.WithResource("provisionings")} {
		objs, err := kc.ListObjects(ctx, gvr, render.Namespace, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range objs {
			out[u.GetKind()+"/"+u.GetName()] = u.GetResourceVersion()
		}
	}
	return out
}

// Against a real kube-apiserver with the manifests installed: site apply
// applies three hosts (the limit of 1 holds two); then a site without
// host-2 and with host-3 (credentials in a file beside it) deletes
// host-2's BareMetalHost and Secrets, makes host-3's with a new host key,
// and leaves host-0's and host-1's objects, the SSH key pair and host-1's
// hold as they were; DHCP's host list answers the site's hosts and
// refuses host-2 once it is gone; the site is kept on the data disk (with its file) and
// a later run chooses it; applying it again changes nothing; sites that
// fail the checks change nothing; no password or private key reaches the
// log, the output or an error.
func TestSiteApplyAddHostRemoveHost(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real etcd and kube-apiserver from the toolchain")
	}
	env := kubetest.Start(t)
	ctx := context.Background()
	kc, err := kube.New(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	if err := kc.ApplyFS(ctx, manifests.FS, manifests.Files()); err != nil {
		t.Fatal(err)
	}
	p := defaultPaths(t.TempDir())
	p.Run = t.TempDir()
	if err := os.MkdirAll(p.State, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := pipeline.SaveState(pipeline.StatePath(p.State), &pipeline.State{Version: pipeline.StateVersion}); err != nil {
		t.Fatal(err)
	}
	var logs, outs, errs strings.Builder
	ctx = logctx.With(ctx, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	o := siteApplyOptions{bundle: t.TempDir(), kubeconfig: env.Kubeconfig, registryAddr: "127.0.0.1:5000", noOperator: time.Nanosecond}
	apply := func(site string) (string, error) {
		t.Helper()
		var out bytes.Buffer
		o.site = site
		err := applySite(ctx, o, p, &out)
		outs.WriteString(out.String())
		if err != nil {
			errs.WriteString(err.Error() + "\n")
		}
		return out.String(), err
	}
	mustContain := func(what, text string, wants ...string) {
		t.Helper()
		for _, w := range wants {
			if !strings.Contains(text, w) {
				t.Errorf("%s lacks %q:\n%s", what, w, text)
			}
		}
	}
	paused := func() string {
		t.Helper()
		hs, err := hoststate.List(ctx, kc)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, h := range hs {
			out = append(out, h.Name+"="+h.Paused)
		}
		return strings.Join(out, " ")
	}
	read := func(path string) string {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	hostNames := func() string {
		t.Helper()
		hs, err := sitestep.ReadHosts(p.hostsFile())
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, h := range hs {
			out = append(out, h.Name)
		}
		return strings.Join(out, " ")
	}

	// The DHCP host list, as dnsmasq reads it.
	dhcpList := func() string {
		t.Helper()
		hs, err := dhcphosts.Read(p.dhcpHosts())
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, h := range hs {
			out = append(out, fmt.Sprintf("%s=%v", h.MAC, h.Answer))
		}
		return strings.Join(out, " ")
	}

	site1, pws1 := writeApplySite(t, t.TempDir(), []int{0, 1, 2}, nil)
	out, err := apply(site1)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := dhcpList(), "52:54:00:00:02:00=true 52:54:00:00:02:01=true 52:54:00:00:02:02=true"; got != want {
		t.Errorf("DHCP answers %s after the first apply, want %s", got, want)
	}
	mustContain("the first apply's output", out, "added:   host-0, host-1, host-2\n", "kept:    none\n", "removed: none\n", "waiting: host-1, host-2 ")
	if got, want := paused(), "host-0= host-1="+sitestep.HoldValue+" host-2="+sitestep.HoldValue; got != want {
		t.Fatalf("paused after the first apply: %s, want %s", got, want)
	}
	key := read(filepath.Join(p.sshKeyDir(), "id_ed25519"))
	hostKey0 := read(filepath.Join(p.sshKeyDir(), "hosts", "host-0", "id_ed25519"))
	rv1 := objectVersions(t, ctx, kc)

	dir2 := t.TempDir()
	site2, pws2 := writeApplySite(t, dir2, []int{0, 1, 3}, nil)
	out, err = apply(site2)
	if err != nil {
		t.Fatal(err)
	}
	mustContain("the second apply's output", out, "added:   host-3\n", "kept:    host-0, host-1\n", "removed: host-2\n", "waiting: host-1, host-3 ")
	// host-2 never registered (held back): its BareMetalHost went at
	// once, and DHCP refuses it from then on.
	const dhcp2 = "52:54:00:00:02:00=true 52:54:00:00:02:01=true 52:54:00:00:02:02=false 52:54:00:00:02:03=true"
	if got := dhcpList(); got != dhcp2 {
		t.Errorf("DHCP answers %s after the second apply, want %s", got, dhcp2)
	}
	rv2 := objectVersions(t, ctx, kc)
	for _, k := range []string{"BareMetalHost/host-2", "Secret/host-2-bmc-secret", "Secret/host-2-user-data"} {
		if _, ok := rv2[k]; !ok && rv1[k] == "" {
			t.Errorf("%s was never there", k)
		} else if ok {
			t.Errorf("%s is still there", k)
		}
	}
	for _, k := range []string{"BareMetalHost/host-3", "Secret/host-3-bmc-secret", "Secret/host-3-user-data"} {
		if rv2[k] == "" {
			t.Errorf("%s is not there", k)
		}
	}
	for _, k := range []string{"BareMetalHost/host-0", "Secret/host-0-bmc-secret", "Secret/host-0-user-data",
		"BareMetalHost/host-1", "Secret/host-1-bmc-secret", "Secret/host-1-user-data", "Secret/" + render.SSHKeySecret} {
		if rv1[k] == "" || rv2[k] != rv1[k] {
			t.Errorf("%s: resourceVersion %q, then %q", k, rv1[k], rv2[k])
		}
	}
	if got, want := paused(), "host-0= host-1="+sitestep.HoldValue+" host-3="+sitestep.HoldValue; got != want {
		t.Errorf("paused after the second apply: %s, want %s", got, want)
	}
	sec, err := env.Client.CoreV1().Secrets(render.Namespace).Get(ctx, render.BMCSecretName("host-3"), metav1.GetOptions{})
	if err != nil || string(sec.Data["password"]) != pws2[2] {
		t.Errorf("host-3's BMC Secret does not carry the password of its credentials file (%v)", err)
	}
	provs, err := kube.List[bpa.Provisioning](ctx, kc, bpa.GroupVersion.WithResource("provisionings"), render.Namespace)
	if err != nil || len(provs) != 1 || len(provs[0].Spec.Masters) != 1 || len(provs[0].Spec.Workers) != 2 ||
		provs[0].Spec.Workers[0]["host-1"].MACaddress == "" || provs[0].Spec.Workers[1]["host-3"].MACaddress == "" {
		t.Errorf("the Provisioning does not name host-0, host-1 and host-3 alone: %+v (%v)", provs, err)
	}
	if read(filepath.Join(p.sshKeyDir(), "id_ed25519")) != key {
		t.Error("the SSH key pair changed")
	}
	if read(filepath.Join(p.sshKeyDir(), "hosts", "host-0", "id_ed25519")) != hostKey0 {
		t.Error("host-0's host key changed")
	}
	if _, err := os.Stat(filepath.Join(p.sshKeyDir(), "hosts", "host-3", "id_ed25519")); err != nil {
		t.Errorf("no host key for host-3: %v", err)
	}
	if got := hostNames(); got != "host-0 host-1 host-3" {
		t.Errorf("hosts for status: %s", got)
	}
	// Kept on the data disk, with its credentials file; a later run
	// chooses it over the site it is given.
	kept := filepath.Join(p.siteStore(), "current", "site.yaml")
	if read(kept) != read(site2) || read(filepath.Join(filepath.Dir(kept), "creds", "host-3.yaml")) != read(filepath.Join(dir2, "creds", "host-3.yaml")) {
		t.Error("the kept site is not the one applied, with its file")
	}
	if fi, err := os.Stat(kept); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("kept site: mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}
	if got := chooseSite(ctx, runOptions{site: site1}, p, "", false); got != kept {
		t.Errorf("a run given --site chooses %s, want the kept %s", got, kept)
	}
	mustContain("the log", logs.String(), "site: using the site firstboot site apply kept on the data disk, instead of the --site file")

	// Again: nothing changes.
	out, err = apply(site2)
	if err != nil {
		t.Fatal(err)
	}
	mustContain("the third apply's output", out, "added:   none\n", "kept:    host-0, host-1, host-3\n", "removed: none\n")
	if rv3 := objectVersions(t, ctx, kc); fmt.Sprint(rv3) != fmt.Sprint(rv2) {
		t.Errorf("applying the same site again changed objects:\n%v\n%v", rv2, rv3)
	}

	// Refused before anything changes.
	for _, c := range []struct {
		name  string
		hosts []int
		edit  func(string) string
		want  []string
	}{
		{"invalid", []int{0, 1, 3, 4}, func(s string) string { return strings.Replace(s, "ipmi://10.10.1.5:623", "ipmii://10.10.1.5:623", 1) },
			[]string{"hosts[3].bmc.address"}},
		{"bootstrap changed", []int{0, 1, 3, 4}, func(s string) string {
			return strings.Replace(s, "  dataDisk: /dev/vdb\n", "  dataDisk: /dev/vdb\n  ntp: [10.10.0.1]\n", 1)
		}, []string{"bootstrap.ntp: [10.10.0.1], where the running site has none"}},
		{"cluster renamed", []int{0, 1, 3, 4}, func(s string) string { return strings.Replace(s, "name: test", "name: other", 1) },
			[]string{`cluster.name: "other", where the running site has "test"`}},
		{"file outside", []int{0, 1, 3, 4}, func(s string) string {
			return strings.Replace(s, "{file: creds/host-3.yaml}", "{file: "+filepath.Join(dir2, "creds", "host-3.yaml")+"}", 1)
		}, []string{"hosts[2].bmc.credentials.file", "not in the site's folder"}},
	} {
		bad, _ := writeApplySite(t, t.TempDir(), c.hosts, c.edit)
		_, err := apply(bad)
		if err == nil {
			t.Errorf("%s: applied", c.name)
			continue
		}
		mustContain(c.name+": the error", err.Error(), append(c.want, bad)...)
		if rv := objectVersions(t, ctx, kc); fmt.Sprint(rv) != fmt.Sprint(rv2) {
			t.Errorf("%s: a refused site changed objects", c.name)
		}
		if read(kept) != read(site2) {
			t.Errorf("%s: a refused site changed the kept one", c.name)
		}
		if _, err := os.Stat(filepath.Join(p.sshKeyDir(), "hosts", "host-4")); !os.IsNotExist(err) {
			t.Errorf("%s: a refused site made a host key (%v)", c.name, err)
		}
		if got := hostNames(); got != "host-0 host-1 host-3" {
			t.Errorf("%s: hosts for status: %s", c.name, got)
		}
		if got := dhcpList(); got != dhcp2 {
			t.Errorf("%s: a refused site changed the DHCP host list: %s", c.name, got)
		}
	}

	for _, needle := range render.LeakNeedles(slices.Concat(pws1, pws2), []byte(key)) {
		for what, text := range map[string]string{"the log": logs.String(), "the output": outs.String(), "an error": errs.String()} {
			if strings.Contains(text, needle) {
				t.Errorf("a secret is in %s: %q", what, needle)
			}
		}
	}
}

// site apply's command line: usage errors exit 2, and a machine where
// firstboot never ran is refused in words, changing nothing.
func TestSiteApplyCommandLine(t *testing.T) {
	site, _ := writeApplySite(t, t.TempDir(), []int{0}, nil)
	data := t.TempDir()
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"site", "apply"}, 2, "--site is required"},
		{[]string{"site", "apply", "--site", site, "extra"}, 2, "unexpected arguments: extra"},
		{[]string{"site", "apply", site, "--data", "relative"}, 2, `--data "relative" must be an absolute path`},
		{[]string{"site", "apply", site, "--data", data, "--bundle", t.TempDir()}, 1, "no firstboot state in " + filepath.Join(data, "firstboot")},
		{[]string{"site"}, 2, "usage: firstboot site COMMAND"},
	} {
		code, out, errs := runCLI(t, c.args...)
		if code != c.code || !strings.Contains(errs, c.want) || out != "" {
			t.Errorf("firstboot %v: code %d, stderr:\n%s\nstdout:\n%s\nwant code %d and %q", c.args, code, errs, out, c.code, c.want)
		}
	}
	if entries, _ := os.ReadDir(data); len(entries) != 0 {
		t.Errorf("a refused site apply wrote into the data folder: %v", entries)
	}
}
