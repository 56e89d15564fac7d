package firstboot

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bootstick/bootstick/internal/kube"
	"github.com/bootstick/bootstick/internal/render"
)

// ipaOverTLS are the deploy ramdisk's own words (its console) that it
// talked to Ironic's API over HTTPS, and served its own API with the
// certificate it made (Ironic's commands, the config drive among them,
// reach it over TLS).
var ipaOverTLS = []struct {
	what string
	re   *regexp.Regexp
}{
	{"its kernel command line naming Ironic's API over HTTPS", regexp.MustCompile(`ipa-api-url=https://` + regexp.QuoteMeta(m3Address) + `:6385\b`)},
	{"its own API's certificate", regexp.MustCompile(`Generating TLS parameters automatically for IP \S+`)},
}

// checkProvisioningTLS checks issue 27's provisioning plane on a host the
// appliance provisioned:
//   - the host's deploy ramdisk looked itself up over HTTPS (the only way
//     Ironic answers: it trusted the provisioning CA its initramfs got at
//     first boot, since no system root signs Ironic's certificate) and
//     made the certificate Ironic sent its commands to;
//   - the node's deploy ramdisk is the one with the CA appended;
//   - Ironic's API answers a client that trusts the provisioning CA, and
//     neither plain HTTP nor a client that trusts the system's roots.
func checkProvisioningTLS(t *testing.T, ctx context.Context, c *kube.Client, host, console string) {
	t.Helper()
	for _, w := range ipaOverTLS {
		if l := w.re.FindString(console); l == "" {
			t.Errorf("%s's console shows no sign of %s", host, w.what)
		} else {
			t.Logf("%s's deploy ramdisk: %s", host, l)
		}
	}
	api := ironicAsBMO(t, ctx, c)
	var nodes struct {
		Nodes []struct {
			Name       string         `json:"name"`
			DriverInfo map[string]any `json:"driver_info"`
		} `json:"nodes"`
	}
	if err := api.do(ctx, http.MethodGet, "/v1/nodes?fields=name,driver_info", nil, &nodes); err != nil {
		t.Errorf("Ironic's API over HTTPS, trusting the provisioning CA: %v", err)
	}
	for _, n := range nodes.Nodes {
		if n.Name != "metal3~"+host {
			continue
		}
		ramdisk := fmt.Sprint(n.DriverInfo["deploy_ramdisk"])
		if !strings.HasSuffix(ramdisk, render.DeployRamdiskFolder+render.DeployRamdisk+".initramfs") {
			t.Errorf("%s's deploy ramdisk is %s, want the one that trusts the provisioning CA (%s)", host, ramdisk, render.DeployRamdiskFolder)
		} else {
			t.Logf("%s's deploy ramdisk: %s", host, ramdisk)
		}
	}

	plain := &http.Client{Timeout: 20 * time.Second}
	if resp, err := plain.Get(fmt.Sprintf("http://%s:%d/", m3Address, render.IronicAPIPort)); err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(body), "default_version") {
			t.Errorf("Ironic's API answered plain HTTP: %s %.200s", resp.Status, body)
		} else {
			t.Logf("Ironic's API to plain HTTP: %s, no API", resp.Status)
		}
	} else {
		t.Logf("Ironic's API to plain HTTP: %v", err)
	}
	var unknown x509.UnknownAuthorityError
	if _, err := plain.Get(fmt.Sprintf("https://%s:%d/", m3Address, render.IronicAPIPort)); !errors.As(err, &unknown) {
		t.Errorf("a client trusting the system's roots reached Ironic's API: %v, want an unknown authority", err)
	} else {
		t.Logf("Ironic's API to a client trusting the system's roots: %v", err)
	}
}
