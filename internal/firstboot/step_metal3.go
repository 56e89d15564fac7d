package firstboot

import (
	"context"
	"crypto/rand"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bootstick/bootstick/internal/kube"
	"github.com/bootstick/bootstick/internal/logctx"
	"github.com/bootstick/bootstick/internal/pipeline"
	"github.com/bootstick/bootstick/internal/render"
	"github.com/bootstick/bootstick/internal/site"
	"github.com/bootstick/bootstick/internal/sitestep"
)

// osImagesLink is the fixed path the ironic Pod mounts the bundle's
// os-images folder from (32-ironic.yaml): the bundle's own path differs
// between the stick and host mode.
const osImagesLink = "/run/bootstick/os-images"

// dhcpLeasesLink is the fixed path the ironic Pod's dnsmasq keeps its
// leases under (32-ironic.yaml), a link to a folder on the data disk.
const dhcpLeasesLink = "/run/bootstick/dhcp-leases"

// dhcpLeases is that folder.
func (p paths) dhcpLeases() string { return filepath.Join(p.Data, "dhcp-leases") }

// dhcpHostsLink is the fixed path the ironic Pod's dnsmasq reads its host
// list from (32-ironic.yaml): a link to dhcpHosts.
const dhcpHostsLink = "/run/bootstick/dhcp-hosts"

// dhcpHosts is the DHCP host list on the data disk (package dhcphosts),
// which the metal3 step and site apply write.
func (p paths) dhcpHosts() string { return filepath.Join(p.Data, "dhcp-hosts") }

// testIronicEnvVar, in a test build only (testhook.go), sets Ironic's
// inspection timeout (seconds): the test of a boot MAC that matches no NIC
// waits for it.
const testIronicEnvVar = "BOOTSTICK_TEST_IRONIC_INSPECT_TIMEOUT"

// LabelNeedsSite marks a Deployment that runs only with a site: Ironic and
// BMO take their settings from the site's provisioning network.
const LabelNeedsSite = "bootstick.dev/needs-site"

// metal3Step gives Ironic and BMO what they wait for (the manifests step
// applied their Deployments without waiting): the provisioning network of
// the site (ConfigMaps), the credentials BMO talks to Ironic with and the
// provisioning CA and Ironic's TLS certificate (Secrets, made on the first
// boot and kept after), the deploy ramdisk that trusts that CA (on the
// data disk), the stick's OS images, and the
// DHCP leases' folder and the DHCP host list (the site's hosts' boot MACs,
// sitestep.WriteDHCPHosts) on the data disk at fixed paths. Then it waits until
// Ironic's API answers (its readiness probe) and BMO runs. Without a site
// there is nothing to provision: the manifests step left Ironic and BMO
// out.
func metal3Step(n *node) pipeline.Step {
	return pipeline.Step{
		Name: "metal3",
		Hint: "check bootstrap.provisioning in the site (firstboot validate); rerunning keeps Ironic's credentials",
		Done: func(ctx context.Context, pc *pipeline.Context) (bool, error) {
			// /run does not survive a reboot: the link is made again.
			if pc.Record.State != pipeline.StateDone {
				return false, nil
			}
			if n.sitePath == "" {
				return true, nil
			}
			t, err := os.Readlink(osImagesLink)
			p, perr := os.Readlink(packagesLink)
			l, lerr := os.Readlink(dhcpLeasesLink)
			h, herr := os.Readlink(dhcpHostsLink)
			d, derr := os.Readlink(deployRamdiskLink)
			return err == nil && t == n.bundle.osImages() && perr == nil && p == n.bundle.packages() &&
				lerr == nil && l == n.paths.dhcpLeases() && herr == nil && h == n.paths.dhcpHosts() &&
				derr == nil && d == n.paths.deployRamdisk(), nil
		},
		Run: func(ctx context.Context, pc *pipeline.Context) error {
			early, err := n.site()
			if err != nil {
				return err
			}
			if early == nil {
				logctx.From(ctx).Info("no site: Ironic and the baremetal-operator are left out (they serve the site's provisioning network)")
				return nil
			}
			if err := checkProvisioningAddress(early.Bootstrap.Provisioning); err != nil {
				return err
			}
			if err := linkOSImages(n.bundle.osImages()); err != nil {
				return err
			}
			if err := os.MkdirAll(noPackages, 0o755); err != nil {
				return err
			}
			if err := link(packagesLink, n.bundle.packages()); err != nil {
				return err
			}
			if err := os.MkdirAll(n.paths.dhcpLeases(), 0o700); err != nil {
				return err
			}
			if err := link(dhcpLeasesLink, n.paths.dhcpLeases()); err != nil {
				return err
			}
			c, err := kube.Load(n.kubeconfig)
			if err != nil {
				return err
			}
			// The host list before Ironic's first start: its dnsmasq reads
			// it as it starts, and each change after.
			if err := sitestep.WriteDHCPHosts(ctx, c, n.paths.dhcpHosts(), early); err != nil {
				return fmt.Errorf("site %s: %w", n.sitePath, err)
			}
			if err := link(dhcpHostsLink, n.paths.dhcpHosts()); err != nil {
				return err
			}
			auth, err := ironicAuth(ctx, c)
			if err != nil {
				return err
			}
			vmedia, err := vmediaPath(ctx, c)
			if err != nil {
				return err
			}
			ip, err := render.ProvisioningIP(early.Bootstrap.Provisioning)
			if err != nil {
				return err
			}
			tls, err := provisioningTLS(ctx, c, ip)
			if err != nil {
				return err
			}
			if err := writeDeployRamdisk(ctx, n.bundle.osImages(), n.paths.deployRamdisk(), tls.CA); err != nil {
				return err
			}
			if err := link(deployRamdiskLink, n.paths.deployRamdisk()); err != nil {
				return err
			}
			bmcCA, err := early.Bootstrap.BMCCA(filepath.Dir(n.sitePath))
			if err != nil {
				return fmt.Errorf("site %s: bootstrap.bmcCAFile %s: %w", n.sitePath, early.Bootstrap.BMCCAFile, err)
			}
			siteClock, err := siteClockServes(ctx, n)
			if err != nil {
				return err
			}
			objs, err := render.Metal3(render.Metal3Inputs{Provisioning: early.Bootstrap.Provisioning, Auth: auth,
				TLS:   render.IronicTLSFiles{CA: tls.CA, CAKey: tls.CAKey, Cert: tls.Cert, Key: tls.Key},
				BMCCA: bmcCA, DNS: early.Bootstrap.DNS, ProvisioningLimit: early.Bootstrap.ProvisioningLimit,
				SiteClock: siteClock, VMediaPath: vmedia})
			if err != nil {
				return fmt.Errorf("site %s: %w", n.sitePath, err)
			}
			for _, o := range objs {
				if cm, ok := o.(*corev1.ConfigMap); ok && cm.Name == render.IronicConfig {
					maps.Copy(cm.Data, testIronicSettings())
				}
			}
			us, err := render.Unstructured(objs)
			if err != nil {
				return err
			}
			if err := c.Apply(ctx, us); err != nil {
				return err
			}
			logctx.From(ctx).Info("Ironic and the baremetal-operator configured", "interface", early.Bootstrap.Provisioning.Interface,
				"address", early.Bootstrap.Provisioning.Address, "dhcpHosts", early.Bootstrap.Provisioning.DHCPHostsMode())
			for _, d := range []struct{ ns, name, what string }{
				{render.IronicNamespace, "ironic", "Ironic's API answers"},
				{render.BMONamespace, "baremetal-operator", "the baremetal-operator runs"},
			} {
				if err := c.WaitDeployment(ctx, d.ns, d.name, n.opts.timeout); err != nil {
					return err
				}
				logctx.From(ctx).Info(d.what, "deployment", d.ns+"/"+d.name)
			}
			return nil
		},
	}
}

// linkOSImages points osImagesLink at dir, replacing an older link.
func linkOSImages(dir string) error {
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("the bundle has no os-images folder %s: the deploy ramdisk and the OS images live there (rebuild the stick)", dir)
	}
	return link(osImagesLink, dir)
}

// link points the symlink at path to target, replacing an older link.
func link(path, target string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	_ = os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return fmt.Errorf("linking %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("linking %s: %w", path, err)
	}
	return nil
}

// ironicAuth reads the credentials of an earlier run, or makes new ones.
// A restarted BMO and Ironic then keep talking to each other.
func ironicAuth(ctx context.Context, c *kube.Client) (render.IronicAuth, error) {
	s, err := c.CS.CoreV1().Secrets(render.BMONamespace).Get(ctx, render.IronicCredentials, metav1.GetOptions{})
	switch {
	case err == nil && len(s.Data["username"]) > 0 && len(s.Data["password"]) > 0:
		return render.IronicAuthFrom(string(s.Data["username"]), string(s.Data["password"]))
	case err == nil || apierrors.IsNotFound(err):
		return render.NewIronicAuth(rand.Reader)
	default:
		return render.IronicAuth{}, fmt.Errorf("reading Secret %s/%s: %w", render.BMONamespace, render.IronicCredentials, err)
	}
}

// vmediaPath reads the virtual-media ISOs' secret path of an earlier
// run, or makes a new one: a restarted Ironic keeps handing out URLs its
// web server serves, and a BMC that holds one keeps reading its ISO.
func vmediaPath(ctx context.Context, c *kube.Client) (string, error) {
	s, err := c.CS.CoreV1().Secrets(render.IronicNamespace).Get(ctx, render.IronicVMedia, metav1.GetOptions{})
	switch {
	case err == nil && len(s.Data["path"]) > 0:
		return string(s.Data["path"]), nil
	case err == nil || apierrors.IsNotFound(err):
		return render.NewVMediaPath(rand.Reader)
	default:
		return "", fmt.Errorf("reading Secret %s/%s: %w", render.IronicNamespace, render.IronicVMedia, err)
	}
}

// checkProvisioningAddress fails when the provisioning interface is not up
// with its address: Ironic's API, its web server and DHCP bind to it.
// On the stick the network unit sets it; in host mode the host's owner does.
func checkProvisioningAddress(p site.ProvisioningNetwork) error {
	want, err := render.ProvisioningIP(p)
	if err != nil {
		return err
	}
	ifc, err := net.InterfaceByName(p.Interface)
	if err != nil {
		return fmt.Errorf("bootstrap.provisioning.interface %s: %w (is it the name of this machine's provisioning NIC?)", p.Interface, err)
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		return fmt.Errorf("bootstrap.provisioning.interface %s: %w", p.Interface, err)
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(ipn.IP); ok && ip.Unmap() == want {
				return nil
			}
		}
	}
	return fmt.Errorf("interface %s does not have bootstrap.provisioning.address %s: Ironic serves the provisioning network from that address (add it: ip addr add %s dev %s)",
		p.Interface, p.Address, p.Address, p.Interface)
}

// siteClockServes says whether the hosts take their time from this
// machine: the clock step ran before, and in host mode it may have left
// the site without a clock (no chronyd; kind mode has no clock step).
// When the site's chronyd runs, it is given up to siteClockWait to
// answer, so one lost query never leaves the hosts on their own clocks.
func siteClockServes(ctx context.Context, n *node) (bool, error) {
	cfg, _, err := clockConfig(n)
	if err != nil {
		return false, err
	}
	if n.opts.mode == "kind" {
		return false, nil
	}
	if active, err := n.services.Active(ctx, clockService); err != nil || !active {
		logctx.From(ctx).Warn("the site's clock does not run here: the hosts keep their own clocks (DHCP names no NTP server, the deploy ramdisk sets none)")
		return false, nil
	}
	if err := waitUntil(ctx, siteClockWait, "the site's clock at "+cfg.Listen.String(), func(ctx context.Context) bool { return clockServes(ctx, n, cfg) }); err != nil {
		return false, err
	}
	return true, nil
}

// siteClockWait bounds how long the metal3 step waits for the site's
// clock to answer.
const siteClockWait = time.Minute
