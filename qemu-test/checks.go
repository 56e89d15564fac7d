package qemutest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/bootstick/bootstick/internal/hostnet"
	"github.com/bootstick/bootstick/internal/qemu"
	"github.com/bootstick/bootstick/internal/registry"
	"github.com/bootstick/bootstick/internal/render"
	"github.com/bootstick/bootstick/internal/site"
	"github.com/bootstick/bootstick/internal/sshkeys"
	"github.com/bootstick/bootstick/internal/status"
)

// Paths and commands in the guest.
const (
	kubectl        = "kubectl --kubeconfig /etc/kubernetes/admin.conf"
	registryAccess = "/var/lib/bootstick/registry/access.log"
)

// Console lines of firstboot.service.
var (
	firstbootStarting = regexp.MustCompile(`bootstick: firstboot\.service starting`)
	firstbootDone     = regexp.MustCompile(`firstboot: done in`)
	firstbootFailed   = regexp.MustCompile(`firstboot\.service: Failed with result`)
)

// maxFailedRuns is how many failed firstboot runs (each restarted by
// systemd after 30 s) a wait tolerates before it gives up early.
const maxFailedRuns = 4

// WaitFirstboot waits for this boot's firstboot run to finish (its "done
// in" line on the console). It gives up after timeout, or early when
// firstboot.service failed maxFailedRuns times.
func (m *Machine) WaitFirstboot(ctx context.Context, timeout time.Duration) (Line, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	from := 0
	for {
		failed := 0
		for _, l := range m.Console.Lines() {
			if firstbootFailed.MatchString(l.Text) {
				failed++
			}
		}
		if failed >= maxFailedRuns {
			return Line{}, fmt.Errorf("firstboot.service failed %d times", failed)
		}
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		l, err := m.Console.Wait(wctx, firstbootDone, from, m.VM.Done())
		wcancel()
		if err == nil {
			return l, nil
		}
		if ctx.Err() != nil {
			return Line{}, fmt.Errorf("firstboot did not finish within %s of waiting: %w", timeout, ctx.Err())
		}
		select {
		case <-m.VM.Done():
			return Line{}, err
		default:
		}
		from = max(0, m.Console.Len()-1)
	}
}

// Status is `firstboot status --json` in the guest.
func (m *Machine) Status(ctx context.Context) (*status.Report, error) {
	out, err := m.Run(ctx, "firstboot status --json")
	if err != nil {
		return nil, err
	}
	var r status.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		return nil, fmt.Errorf("firstboot status --json: %w", err)
	}
	return &r, nil
}

// GuestAhead is how far the guest's clock runs ahead of the host's, to
// put the state file's times on the host's axis.
func (m *Machine) GuestAhead(ctx context.Context) (time.Duration, error) {
	before := time.Now()
	out, err := m.Run(ctx, "date +%s.%N")
	if err != nil {
		return 0, err
	}
	after := time.Now()
	secs, err := strconv.ParseFloat(strings.TrimSpace(out), 64)
	if err != nil {
		return 0, fmt.Errorf("the guest's date: %q", out)
	}
	guest := time.Unix(0, int64(secs*1e9))
	mid := before.Add(after.Sub(before) / 2)
	return guest.Sub(mid), nil
}

// Timeline builds this boot's time table from its console and state file.
func (m *Machine) Timeline(ctx context.Context, title string) (Timeline, error) {
	lines := m.Console.Lines()
	ahead, err := m.GuestAhead(ctx)
	if err != nil {
		return BuildTimeline(title, lines, nil, 0, m.PowerOn), err
	}
	rep, err := m.Status(ctx)
	return BuildTimeline(title, lines, rep, ahead, m.PowerOn), err
}

// Snapshot is what the cluster holds that a reboot must keep: each
// checked object's UID by kind/namespace/name.
type Snapshot map[string]string

// ObjectKey names an object in a Snapshot.
func ObjectKey(kind, namespace, name string) string { return kind + "/" + namespace + "/" + name }

// SiteObjects are the objects the site renders to, as kind/namespace/name
// keys, with the kubectl resource names to list them by.
func SiteObjects(sitePath string) (keys []string, resources []string, err error) {
	s, err := site.Load(sitePath, site.Options{})
	if err != nil {
		return nil, nil, err
	}
	key, err := sshkeys.Generate(nil)
	if err != nil {
		return nil, nil, err
	}
	objs, err := render.Render(s, render.Options{SSHKey: key})
	if err != nil {
		return nil, nil, err
	}
	for _, o := range objs {
		gvk := o.GetObjectKind().GroupVersionKind()
		keys = append(keys, ObjectKey(gvk.Kind, o.GetNamespace(), o.GetName()))
		res := strings.ToLower(gvk.Kind)
		if gvk.Group != "" {
			res += "." + gvk.Group
		}
		if !slices.Contains(resources, res) {
			resources = append(resources, res)
		}
	}
	return keys, resources, nil
}

// kubeList is the part of a kubectl -o json list the checks read.
type kubeList struct {
	Items []struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
			UID       string `json:"uid"`
		} `json:"metadata"`
		Spec struct {
			Containers     []struct{ Image string } `json:"containers"`
			InitContainers []struct{ Image string } `json:"initContainers"`
		} `json:"spec"`
		Status struct {
			Phase      string `json:"phase"`
			Conditions []struct {
				Type   string `json:"type"`
				Status string `json:"status"`
			} `json:"conditions"`
			ContainerStatuses []struct {
				Name    string `json:"name"`
				Ready   bool   `json:"ready"`
				Image   string `json:"image"`
				ImageID string `json:"imageID"`
			} `json:"containerStatuses"`
		} `json:"status"`
	} `json:"items"`
}

func (m *Machine) kubeGet(ctx context.Context, args string) (*kubeList, error) {
	out, err := m.Run(ctx, kubectl+" get "+args+" -o json")
	if err != nil {
		return nil, err
	}
	var l kubeList
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		return nil, fmt.Errorf("kubectl get %s: %w", args, err)
	}
	return &l, nil
}

// checkNodeAndPods checks that every node is Ready and that every pod
// (but those of the namespaces except) runs, ready, from images the
// stick's registry served. It returns each problem found, the nodes'
// snapshot, and an error when the cluster could not be read.
func (m *Machine) checkNodeAndPods(ctx context.Context, except ...string) (Snapshot, []error, error) {
	var errs []error
	snap := Snapshot{}
	nodes, err := m.kubeGet(ctx, "nodes")
	if err != nil {
		return nil, nil, err
	}
	if len(nodes.Items) == 0 {
		errs = append(errs, errors.New("no nodes"))
	}
	for _, n := range nodes.Items {
		snap[ObjectKey("Node", "", n.Metadata.Name)] = n.Metadata.UID
		if !conditionTrue(n.Status.Conditions, "Ready") {
			errs = append(errs, fmt.Errorf("node %s is not Ready: %+v", n.Metadata.Name, n.Status.Conditions))
		}
	}

	pods, err := m.kubeGet(ctx, "pods -A")
	if err != nil {
		return nil, errs, err
	}
	log, err := m.Run(ctx, "cat "+registryAccess)
	if err != nil {
		errs = append(errs, fmt.Errorf("reading the registry's access log: %w", err))
	}
	pulled, err := PulledRefs(log)
	if err != nil {
		errs = append(errs, err)
	}
	if len(pods.Items) == 0 {
		errs = append(errs, errors.New("no pods"))
	}
	for _, p := range pods.Items {
		if slices.Contains(except, p.Metadata.Namespace) {
			continue
		}
		name := p.Metadata.Namespace + "/" + p.Metadata.Name
		if p.Status.Phase != "Running" {
			errs = append(errs, fmt.Errorf("pod %s is %s, not Running", name, p.Status.Phase))
		}
		for _, c := range p.Status.ContainerStatuses {
			if !c.Ready {
				errs = append(errs, fmt.Errorf("pod %s: container %s is not ready", name, c.Name))
			}
			// The digest containerd resolved the image to must be one the
			// stick's registry served.
			if _, d, ok := strings.Cut(c.ImageID, "@"); !ok || !pulled[d] {
				errs = append(errs, fmt.Errorf("pod %s: container %s runs %s (%s), which the stick's registry did not serve", name, c.Name, c.Image, c.ImageID))
			}
		}
		var images []string
		for _, c := range p.Spec.InitContainers {
			images = append(images, c.Image)
		}
		for _, c := range p.Spec.Containers {
			images = append(images, c.Image)
		}
		for _, img := range images {
			r, err := registry.ParseRef(img)
			if err != nil {
				errs = append(errs, fmt.Errorf("pod %s: image %s: %w", name, img, err))
				continue
			}
			key := r.String()
			if r.Digest != "" {
				key = r.Digest
			}
			if !pulled[key] {
				errs = append(errs, fmt.Errorf("pod %s: image %s was not served by the stick's registry (its access log has %s)", name, img, strings.Join(sortedKeys(pulled), ", ")))
			}
		}
	}

	return snap, errs, nil
}

// CheckOwnCluster waits up to within for the appliance's own cluster as
// firstboot's steps before metal3 leave it: the node Ready, and every pod
// but Ironic's and the baremetal-operator's (which the metal3 step
// starts, with the site's provisioning settings) Running from images the
// stick's registry served. It returns the problems of the last look.
func (m *Machine) CheckOwnCluster(ctx context.Context, within time.Duration) []error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	errs, _ := recheck(ctx, within, 5*time.Second, func() []error {
		_, errs, err := m.checkNodeAndPods(ctx, render.IronicNamespace, render.BMONamespace)
		if err != nil {
			errs = append(errs, err)
		}
		return errs
	})
	if len(errs) > 0 {
		errs = append(errs, fmt.Errorf("still so after %s of waiting", within))
	}
	return errs
}

// CheckCluster is scenario 1's proof, run in the guest over SSH: every
// node Ready; every pod Running with its containers ready; every pod image
// served by the stick's registry (its access log); and every object the
// site renders to present. It returns each problem found and the
// snapshot a reboot must keep.
func (m *Machine) CheckCluster(ctx context.Context, sitePath string) (Snapshot, []error) {
	snap, errs, err := m.checkNodeAndPods(ctx)
	if err != nil {
		return nil, append(errs, err)
	}
	if sitePath == "" {
		return snap, append(errs, errors.New("no site file to check the site's objects against (set "+EnvSite+")"))
	}
	want, resources, err := SiteObjects(sitePath)
	if err != nil {
		return snap, append(errs, fmt.Errorf("rendering the test site: %w", err))
	}
	have := map[string]string{}
	for _, res := range resources {
		l, err := m.kubeGet(ctx, res+" -A")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, it := range l.Items {
			have[ObjectKey(it.Kind, it.Metadata.Namespace, it.Metadata.Name)] = it.Metadata.UID
		}
	}
	for _, k := range want {
		uid, ok := have[k]
		if !ok {
			errs = append(errs, fmt.Errorf("the site's %s is missing from the cluster", k))
			continue
		}
		snap[k] = uid
	}
	return snap, errs
}

func conditionTrue(conds []struct {
	Type   string `json:"type"`
	Status string `json:"status"`
}, t string) bool {
	for _, c := range conds {
		if c.Type == t {
			return c.Status == "True"
		}
	}
	return false
}

// PulledRefs reads the registry's access log: the references
// (registry/repository:tag) and the digests of the manifests it served.
func PulledRefs(log string) (map[string]bool, error) {
	return registry.ServedManifests(strings.NewReader(log))
}

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// CompareSnapshots lists what changed between two snapshots: an object
// gone, or recreated (a new UID).
func CompareSnapshots(before, after Snapshot) []error {
	var errs []error
	keys := make([]string, 0, len(before))
	for k := range before {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		switch uid, ok := after[k]; {
		case !ok:
			errs = append(errs, fmt.Errorf("%s is gone after the reboot", k))
		case uid != before[k]:
			errs = append(errs, fmt.Errorf("%s was recreated after the reboot (uid %s, was %s)", k, uid, before[k]))
		}
	}
	return errs
}

// serviceUnits are the services firstboot starts (internal/firstboot).
var serviceUnits = []string{"bootstick-registry", "bootstick-containerd", "bootstick-kubelet"}

// CheckTransientUnits checks that each of firstboot's services is a
// running transient unit: started through systemd's D-Bus API, not a
// unit file.
func (m *Machine) CheckTransientUnits(ctx context.Context) []error {
	var errs []error
	for _, u := range serviceUnits {
		out, err := m.Run(ctx, "systemctl show -p Transient -p ActiveState -p SubState "+u+".service")
		if err != nil {
			errs = append(errs, fmt.Errorf("systemctl show %s: %w", u, err))
			continue
		}
		for _, want := range []string{"Transient=yes", "ActiveState=active", "SubState=running"} {
			if !strings.Contains(out, want) {
				errs = append(errs, fmt.Errorf("unit %s.service: want %s, systemctl shows:\n%s", u, want, out))
			}
		}
	}
	return errs
}

// CheckKernel checks that the guest's kernel log holds no fault (see
// kernelFault), naming the first 5 such lines, and that under TCG its
// clock source is the TSC.
func (m *Machine) CheckKernel(ctx context.Context) []error {
	out, err := m.Run(ctx, "dmesg")
	if err != nil {
		return []error{fmt.Errorf("reading the kernel log: %w", err)}
	}
	var faults []string
	for _, line := range strings.Split(out, "\n") {
		if kernelFault.MatchString(line) {
			faults = append(faults, line)
		}
	}
	var errs []error
	if len(faults) > 0 {
		errs = append(errs, fmt.Errorf("the kernel logged %d faults; the first: %s", len(faults), strings.Join(faults[:min(len(faults), 5)], " | ")))
	}
	// Under TCG the kernel reads the clock from the TSC, as a server's
	// does, not from an emulated HPET, a trap into QEMU each time (the
	// guest's vCPUs are cores of one socket: package qemu).
	if m.VM.Accel.Name == "tcg" {
		if cs, err := m.Run(ctx, "cat /sys/devices/system/clocksource/clocksource0/current_clocksource"); err != nil || strings.TrimSpace(cs) != "tsc" {
			errs = append(errs, fmt.Errorf("the kernel's clock source is %q (%v), want tsc", strings.TrimSpace(cs), err))
		}
	}
	return errs
}

// CheckFirewall checks that the appliance loaded its firewall (package
// firewall): the provisioning interface's traffic goes to a chain that
// accepts the hosts' services (DHCP, TFTP, NTP, the registry, Ironic's
// API and image server) and refuses the rest; the API server and sshd
// are not among them (the test site opens neither).
func (m *Machine) CheckFirewall(ctx context.Context) []error {
	out, err := m.Run(ctx, "nft list table inet bootstick")
	if err != nil {
		return []error{fmt.Errorf("the firewall's table: %w\n%s", err, out)}
	}
	var errs []error
	for _, want := range []string{`iifname "` + qemu.ProvisioningNICName + `" jump provisioning`,
		"udp dport 67 accept", "udp dport 69 accept", "udp dport 123 accept",
		"tcp dport 5000 accept", "tcp dport 6180 accept", "tcp dport 6385 accept", `reject with icmpx admin-prohibited comment "everything else"`} {
		if !strings.Contains(out, want) {
			errs = append(errs, fmt.Errorf("the firewall's table lacks %q:\n%s", want, out))
		}
	}
	for _, port := range []string{"dport 22 ", "dport 6443 ", "dport 2379 ", "dport 10250 "} {
		if strings.Contains(out, port) {
			errs = append(errs, fmt.Errorf("the firewall opens %q to the provisioning network, which the site does not ask for:\n%s", port, out))
		}
	}
	if rep, err := m.Status(ctx); err != nil || !strings.HasPrefix(rep.Firewall, "loaded: ") {
		errs = append(errs, fmt.Errorf("firstboot status does not show the firewall loaded (%v): %+v", err, rep))
	}
	return errs
}

// CheckHostKey checks that sshd shows the machine's own host key: the one
// the SSH client saw is the one kept on the data disk, and the stick's
// file systems carry none.
func (m *Machine) CheckHostKey(ctx context.Context) []error {
	m.keys.mu.Lock()
	seen := m.keys.key
	m.keys.mu.Unlock()
	if seen == nil {
		return []error{errors.New("no SSH host key seen yet")}
	}
	var errs []error
	parse := func(what, out string) ssh.PublicKey {
		k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(out))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w (%q)", what, err, out))
			return nil
		}
		return k
	}
	kept, err := m.Run(ctx, "cat /var/lib/bootstick/ssh-host-keys/ssh_host_ed25519_key.pub")
	if err != nil {
		return []error{fmt.Errorf("the host key kept on the data disk: %w", err)}
	}
	if k := parse("the kept host key", kept); k != nil && !bytes.Equal(k.Marshal(), seen) {
		errs = append(errs, errors.New("sshd's host key is not the one kept on the data disk"))
	}
	// The stick's file systems carry no host key at all: one built in
	// would be the same on every stick of one build cache, its private
	// half readable by anyone holding one.
	built, err := m.Run(ctx, "ls -d /run/live/rootfs/*/etc/ssh/ssh_host_* 2>/dev/null || true")
	if err != nil {
		errs = append(errs, fmt.Errorf("listing the stick's built-in host keys: %w", err))
	} else if b := strings.TrimSpace(built); b != "" {
		errs = append(errs, fmt.Errorf("the stick's file systems carry sshd host keys: %s", strings.ReplaceAll(b, "\n", ", ")))
	}
	return errs
}

// CheckSettled runs CheckCluster until it finds nothing wrong or within
// passes: after a reboot firstboot has nothing to do, and the pods come
// back on their own (kubelet restarts them) after it reports done. It
// returns the last check's findings and how long the pods took.
func (m *Machine) CheckSettled(ctx context.Context, sitePath string, within time.Duration) (Snapshot, []error, time.Duration) {
	var snap Snapshot
	errs, took := recheck(ctx, within, 15*time.Second, func() []error {
		var errs []error
		snap, errs = m.CheckCluster(ctx, sitePath)
		return errs
	})
	return snap, errs, took
}

// recheck runs check every so often until it finds nothing wrong, within
// has passed or ctx ends. It returns the last check's findings and how
// long the checks took.
func recheck(ctx context.Context, within, every time.Duration, check func() []error) ([]error, time.Duration) {
	start := time.Now()
	for {
		errs := check()
		if len(errs) == 0 || time.Since(start) > within || ctx.Err() != nil {
			return errs, time.Since(start)
		}
		select {
		case <-ctx.Done():
		case <-time.After(every):
		}
	}
}

// CheckNoRouter checks the appliance of a site that names no gateway: its
// default route goes straight onto the provisioning network (below any
// other), the node's address in the cluster is the provisioning address,
// and the network service said so.
func (m *Machine) CheckNoRouter(ctx context.Context, provisioningAddr string) []error {
	var errs []error
	routes, err := m.Run(ctx, "ip route show default")
	if err != nil {
		return []error{fmt.Errorf("ip route: %w", err)}
	}
	if !strings.Contains(routes, "default dev "+qemu.ProvisioningNICName+" ") || !strings.Contains(routes, "metric "+hostnet.NoRouterMetric) {
		errs = append(errs, fmt.Errorf("the default route is not onto the provisioning network (%s, metric %s):\n%s", qemu.ProvisioningNICName, hostnet.NoRouterMetric, routes))
	}
	ip, err := m.Run(ctx, kubectl+` get nodes -o jsonpath='{.items[*].status.addresses[?(@.type=="InternalIP")].address}'`)
	if err != nil {
		errs = append(errs, fmt.Errorf("the node's InternalIP: %w", err))
	} else if strings.TrimSpace(ip) != provisioningAddr {
		errs = append(errs, fmt.Errorf("the node's InternalIP is %q, want the provisioning address %s", strings.TrimSpace(ip), provisioningAddr))
	}
	said, err := m.Run(ctx, "journalctl -b -o cat -u bootstick-network.service")
	if err != nil || !strings.Contains(said, "the site names no gateway") {
		errs = append(errs, fmt.Errorf("bootstick-network.service did not say the site names no gateway (%v):\n%s", err, said))
	}
	return errs
}
