package firstboot

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bootstick/bootstick/internal/ironictls"
	"github.com/bootstick/bootstick/internal/kube"
	"github.com/bootstick/bootstick/internal/logctx"
	"github.com/bootstick/bootstick/internal/ramdisk"
	"github.com/bootstick/bootstick/internal/render"
)

// deployRamdiskLink is the fixed path the ironic Pod's web server serves
// the deploy ramdisk that trusts the provisioning CA from (32-ironic.yaml,
// render.DeployRamdiskFolder): a link to deployRamdisk.
const deployRamdiskLink = "/run/bootstick/deploy-ramdisk"

// deployRamdisk is that folder, on the data disk.
func (p paths) deployRamdisk() string { return filepath.Join(p.Data, "deploy-ramdisk") }

// The files the deploy ramdisk gets appended: the provisioning CA, and the
// agent's setting that makes it trust that CA alone. The CA sits where
// Ironic puts it on a virtual-media ISO (its [agent] api_ca_file); the
// setting is in the folder oslo.config reads for the program
// ironic-python-agent (/etc/ironic-python-agent.conf.d), and a setting
// there outweighs the kernel's command line (ipa-insecure).
const (
	ipaCAFile   = "etc/ironic-python-agent/ironic.crt"
	ipaTLSConf  = "etc/ironic-python-agent.conf.d/bootstick-tls.conf"
	ipaTLSValue = `# bootstick: the agent talks to Ironic's API (its lookup, heartbeats and
# inspection data) only when the provisioning CA, made by the bootstrap
# machine at its first boot, signed the API's certificate.
[DEFAULT]
insecure = false
cafile = /` + ipaCAFile + "\n"
)

// provisioningTLS reads the provisioning CA and Ironic's certificate of an
// earlier run (issuing the certificate again for a new provisioning
// address or near its end), or makes them.
func provisioningTLS(ctx context.Context, c *kube.Client, ip netip.Addr) (*ironictls.Set, error) {
	log := logctx.From(ctx)
	s, err := c.CS.CoreV1().Secrets(render.IronicNamespace).Get(ctx, render.ProvisioningCA, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		set, err := ironictls.New(rand.Reader, ip, time.Now())
		if err == nil {
			log.Info("made the provisioning CA and Ironic's TLS certificate", "address", ip)
		}
		return set, err
	case err != nil:
		return nil, fmt.Errorf("reading Secret %s/%s: %w", render.IronicNamespace, render.ProvisioningCA, err)
	}
	set, err := ironictls.Load(s.Data["ca.crt"], s.Data["ca.key"], s.Data["tls.crt"], s.Data["tls.key"])
	if err != nil {
		return nil, fmt.Errorf("Secret %s/%s: %w (delete it to make a new CA: kubectl -n %s delete secret %s; hosts deploying then boot their deploy ramdisk again)",
			render.IronicNamespace, render.ProvisioningCA, err, render.IronicNamespace, render.ProvisioningCA)
	}
	renewed, err := set.Renew(rand.Reader, ip, time.Now())
	if err != nil {
		return nil, err
	}
	if renewed {
		log.Info("issued Ironic's TLS certificate again (a new provisioning address, or near its end)", "address", ip)
	}
	return set, nil
}

// writeDeployRamdisk writes the deploy ramdisk that trusts the provisioning
// CA into dir: the bundle's, with ca appended (package ramdisk). It is
// written again only when the bundle's ramdisk or the CA changed.
func writeDeployRamdisk(ctx context.Context, osImages, dir string, ca []byte) error {
	extra, err := ramdisk.Extra([]ramdisk.File{
		{Path: ipaCAFile, Mode: 0o644, Data: ca},
		{Path: ipaTLSConf, Mode: 0o644, Data: []byte(ipaTLSValue)},
	})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("the deploy ramdisk's folder: %w", err)
	}
	start := time.Now()
	dst := filepath.Join(dir, render.DeployRamdisk+".initramfs")
	wrote, err := ramdisk.Derive(filepath.Join(osImages, render.DeployRamdisk+".initramfs"), dst, extra)
	if err != nil {
		return err
	}
	if wrote {
		logctx.From(ctx).Info("the deploy ramdisk trusts the provisioning CA", "path", dst, "took", time.Since(start).Round(time.Millisecond))
	}
	return nil
}
