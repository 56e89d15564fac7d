package firstboot

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	flag "github.com/spf13/pflag"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bootstick/bootstick/internal/bmcprobe"
	bpa "github.com/bootstick/bootstick/internal/bpa/v1alpha1"
	"github.com/bootstick/bootstick/internal/cli"
	"github.com/bootstick/bootstick/internal/dhcphosts"
	"github.com/bootstick/bootstick/internal/hoststate"
	"github.com/bootstick/bootstick/internal/kube"
	"github.com/bootstick/bootstick/internal/pipeline"
	"github.com/bootstick/bootstick/internal/render"
	"github.com/bootstick/bootstick/internal/site"
	"github.com/bootstick/bootstick/internal/sitestep"
	"github.com/bootstick/bootstick/internal/status"
)

func init() {
	register(cli.Command{
		Name:  "status",
		Usage: "status [--json] [--data DIR]",
		Short: "show each step's state and duration, and the last error with a hint",
		Flags: func(fs *flag.FlagSet) func(ctx context.Context, args []string) error {
			asJSON := fs.Bool("json", false, "print JSON")
			data := fs.String("data", defaultData, "where persistent state lives")
			return func(ctx context.Context, args []string) error {
				if err := cli.NoArgs(args); err != nil {
					return err
				}
				r, err := buildStatus(defaultPaths(*data))
				if err != nil {
					return err
				}
				if *asJSON {
					return r.WriteJSON(os.Stdout)
				}
				return r.WriteText(os.Stdout)
			}
		},
	})
}

func buildStatus(p paths) (status.Report, error) {
	st, err := pipeline.LoadState(pipeline.StatePath(p.State))
	if err != nil {
		return status.Report{}, err
	}
	in := status.Input{State: st}
	lock := p.lock()
	if pipeline.Held(lock) {
		in.Running, in.HolderPID = true, pipeline.LockHolder(lock)
	}
	bad, err := readCorruptions(p.corruptFile())
	if err != nil {
		in.Problems = append(in.Problems, err.Error())
	}
	for _, c := range bad {
		in.Problems = append(in.Problems, fmt.Sprintf("the bundle's registry refused corrupted blob %s (%s, image %s, file %s): the bundle is damaged; rebuild or re-copy it",
			c.Digest, c.Detail, c.Image, c.Path))
	}
	r := status.Build(in)
	var problem bool
	if r.Firewall, problem = firewallStatus(p); problem {
		r.Problems = append(r.Problems, "firewall "+r.Firewall)
	}
	if r.DataDisk, problem = dataDiskStatus(p); problem {
		r.Problems = append(r.Problems, "data disk "+r.DataDisk)
	}
	hosts, err := sitestep.ReadHosts(p.hostsFile())
	if err != nil {
		r.Problems = append(r.Problems, err.Error())
	}
	for _, h := range hosts {
		r.Notes = append(r.Notes, site.Unserved(h.Name, "", h.Requires)...)
	}
	// kind mode keeps its cluster's kubeconfig on the data folder; the
	// other modes have kubeadm's.
	kubeconfig := adminConf
	if _, err := os.Stat(p.kindKubeconfig()); err == nil {
		kubeconfig = p.kindKubeconfig()
	}
	if _, err := os.Stat(kubeconfig); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r.Cluster, r.Hosts = clusterStatus(ctx, kubeconfig, hosts, p.dhcpHosts())
	} else {
		for _, h := range hosts {
			r.Hosts = append(r.Hosts, hostRow(h))
		}
	}
	return r, nil
}

// hostRow is a site host as status shows it before the cluster answers,
// with how the baremetal-operator registers its BMC address in Ironic.
func hostRow(h sitestep.Host) status.Host {
	hw, boot := site.BMCDriver(h.BMC)
	return status.Host{Name: h.Name, Role: h.Role, BMC: h.BMC, MAC: h.MAC,
		BMCType: hw, BootMode: h.BootMode, BootInterface: boot}
}

// clusterStatus asks the API server about the node, the pods that are not
// ready, which machines DHCP answers (with the host list in dhcpDir) and
// the BareMetalHosts, merged with the site's hosts.
func clusterStatus(ctx context.Context, kubeconfig string, hosts []sitestep.Host, dhcpDir string) (*status.Cluster, []status.Host) {
	out := make([]status.Host, 0, len(hosts))
	for _, h := range hosts {
		out = append(out, hostRow(h))
	}
	c := &status.Cluster{PodsNotReady: []string{}}
	cfg, err := kube.ReadConfig(kubeconfig)
	if err != nil {
		c.Error = err.Error()
		return c, out
	}
	cfg.Timeout = 4 * time.Second
	kc, err := kube.New(cfg)
	if err != nil {
		c.Error = err.Error()
		return c, out
	}
	nodes, err := kc.CS.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		c.Error = err.Error()
		return c, out
	}
	for _, n := range nodes.Items {
		c.Node, c.NodeReady = n.Name, kube.NodeReady(n)
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				c.NodeAddress = a.Address
			}
		}
	}
	if c.PodsNotReady, err = kc.PodsNotReady(ctx, ""); err != nil {
		c.Error = err.Error()
		return c, out
	}
	for _, sv := range []struct{ name, ns, deploy, ready string }{
		{"Ironic", render.IronicNamespace, "ironic", "ready (its API answers)"},
		{"baremetal-operator", render.BMONamespace, "baremetal-operator", "ready"},
		{"BPA", "bpa-system", "bpa-operator", "ready"},
	} {
		w, err := kc.DeploymentState(ctx, sv.ns, sv.deploy)
		if err != nil {
			c.Error = err.Error()
			return c, out
		}
		s := status.Service{Name: sv.name, Deployment: sv.ns + "/" + sv.deploy, State: "not deployed", Restarts: w.Restarts}
		switch {
		case w.Ready:
			s.State = sv.ready
		case w.Present:
			s.State, s.Detail = "not ready", w.Detail
		}
		c.Services = append(c.Services, s)
	}
	if c.DHCP, err = dhcpStatus(ctx, kc, dhcpDir); err != nil {
		c.Error = err.Error()
		return c, out
	}
	if len(hosts) > 0 {
		states, err := hoststate.List(ctx, kc)
		if err != nil {
			c.Error = err.Error()
			return c, out
		}
		byName := map[string]hoststate.Host{}
		for _, s := range states {
			byName[s.Name] = s
		}
		// The BPA's view once a host is provisioned; a cluster without the
		// BPA's kind (no Provisioning yet) shows none.
		nodes, _ := hoststate.ClusterHosts(ctx, kc)
		for i := range out {
			if n, ok := nodes[out[i].Name]; ok {
				out[i].Node, out[i].NodeError = nodeState(n), n.Error
			}
		}
		for i := range out {
			if s, ok := byName[out[i].Name]; ok {
				out[i].State, out[i].ErrorType, out[i].Error = s.State, s.ErrorType, s.Error
				out[i].Reason = status.HostReason(s.ErrorType, s.Error)
				if s.Error == "" && s.State != "provisioned" {
					// The operator cleared its message to try again (after a
					// failed deploy it even resets its count): the site step
					// kept the last one.
					if h := hosts[i]; h.LastError != "" {
						out[i].ErrorType, out[i].Error = h.LastErrorType, h.LastError
						out[i].Reason = status.HostReason(h.LastErrorType, h.LastError) +
							fmt.Sprintf("; that was %v ago, and the baremetal-operator is trying again", time.Since(h.LastErrorAt).Round(time.Second))
					} else if s.ErrorCount > 0 {
						out[i].Reason = fmt.Sprintf("trying again after %d failed tries", s.ErrorCount)
					}
				}
				if why := sitestep.StuckRegistering(s, sitestep.RegisteringLimit); why != "" {
					out[i].Reason = why
				}
				if st := sitestep.StateOf(s); st == sitestep.Waiting {
					out[i].State = st
					out[i].Reason = "held back by firstboot until a host at work is provisioned or has failed: bootstrap.provisioningLimit hosts work at once"
				}
				if !s.Since.IsZero() {
					out[i].Since, out[i].SecondsInState = s.Since, time.Since(s.Since).Round(time.Second).Seconds()
				}
			} else {
				out[i].Error = "no BareMetalHost"
			}
		}
		sharpenBMCReasons(ctx, out)
	}
	return c, out
}

// sharpenBMCReasons probes, all at once, the BMCs of hosts with a
// registration error: a probe without credentials tells a BMC that is not
// there from one that refuses the user name and password.
func sharpenBMCReasons(ctx context.Context, hosts []status.Host) {
	var wg sync.WaitGroup
	for i := range hosts {
		h := &hosts[i]
		if h.ErrorType != "registration error" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r, _ := bmcprobe.Probe(ctx, h.BMC, 3*time.Second); r != bmcprobe.Unknown {
				h.Reason = status.BMCReason(h.BMC, r == bmcprobe.Answers, h.Error)
			}
		}()
	}
	wg.Wait()
}

// nodeState words the BPA's state of a host: Installing names its phase.
func nodeState(h bpa.HostStatus) string {
	switch h.State {
	case bpa.HostInstalling, bpa.HostUnreachable, bpa.HostUnfit, bpa.HostReady, bpa.HostError:
	default:
		return "" // not provisioned yet: the STATE column says where it is
	}
	if h.State == bpa.HostInstalling {
		for _, ph := range h.Phases {
			if ph.Finished == nil {
				return "installing: " + ph.Name
			}
		}
	}
	return strings.ToLower(string(h.State))
}

// dhcpStatus is which machines Ironic's DHCP answers: the mode it runs
// with (its ConfigMap's DHCP_HOSTS) and the host list in dir. Nil when
// Ironic has no configuration (no site).
func dhcpStatus(ctx context.Context, kc *kube.Client, dir string) (*status.DHCP, error) {
	cm, err := kc.CS.CoreV1().ConfigMaps(render.IronicNamespace).Get(ctx, render.IronicConfig, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading Ironic's configuration: %w", err)
	}
	d := &status.DHCP{Hosts: cmp.Or(cm.Data["DHCP_HOSTS"], site.DHCPHostsSite), Answers: []string{}, Refuses: []string{}}
	list, err := dhcphosts.Read(dir)
	if err != nil {
		d.Error = err.Error()
		return d, nil
	}
	for _, h := range list {
		if h.Answer {
			d.Answers = append(d.Answers, h.MAC)
		} else {
			d.Refuses = append(d.Refuses, h.MAC)
		}
	}
	return d, nil
}
