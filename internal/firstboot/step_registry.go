package firstboot

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/bootstick/bootstick/internal/logctx"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/bootstick/bootstick/internal/pipeline"
	"github.com/bootstick/bootstick/internal/supervise"
)

// registryStep serves the bundle's OCI layout read-only as a registry, a
// service of its own, on loopback and on the site's provisioning address.
func registryStep(n *node) pipeline.Step {
	return pipeline.Step{
		Name: "registry",
		Hint: "see /run/bootstick/services/bootstick-registry.log; a corrupted blob means the bundle is damaged: rebuild or re-copy it",
		Done: func(ctx context.Context, pc *pipeline.Context) (bool, error) { return registryUp(ctx, n), nil },
		Run: func(ctx context.Context, pc *pipeline.Context) error {
			if err := os.MkdirAll(filepath.Dir(n.paths.registryLog()), 0o755); err != nil {
				return err
			}
			self, err := os.Executable()
			if err != nil {
				return err
			}
			err = n.services.Start(ctx, supervise.Service{
				Name: registryService, Description: "bootstick bundle registry",
				Command: []string{self, "registry", "--layout", n.bundle.layout, "--listen", strings.Join(registryAddrs(ctx, n), ","),
					"--access-log", n.paths.registryLog(), "--corrupt-file", n.paths.corruptFile()},
			})
			if err != nil {
				return err
			}
			return waitUntil(ctx, 30*time.Second, "the registry at "+registryURL(n), func(ctx context.Context) bool { return registryUp(ctx, n) })
		},
	}
}

func registryURL(n *node) string { return "http://" + n.opts.registryAddr }

// registryUp reports whether the registry's service runs and answers.
func registryUp(ctx context.Context, n *node) bool {
	if active, err := n.services.Active(ctx, registryService); err != nil || !active {
		return false
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, registryURL(n)+"/v2/", nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK && resp.Header.Get("Docker-Distribution-API-Version") != ""
}

// registryAddrs are the registry's listen addresses: loopback, and the
// site's provisioning address when this machine has it.
func registryAddrs(ctx context.Context, n *node) []string {
	addrs := []string{n.opts.registryAddr}
	s, err := n.site()
	if err != nil || s == nil || s.Bootstrap.Provisioning.Address == "" {
		return addrs
	}
	ip, _, err := net.ParseCIDR(s.Bootstrap.Provisioning.Address)
	if err != nil {
		return addrs
	}
	_, port, _ := net.SplitHostPort(n.opts.registryAddr)
	if !localIP(ip) {
		logctx.From(ctx).Warn("the provisioning address is not on any interface yet; the registry listens on loopback only", "address", ip.String())
		return addrs
	}
	return append(addrs, net.JoinHostPort(ip.String(), port))
}

func localIP(ip net.IP) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}

// waitUntil polls ok until it is true or timeout passes.
func waitUntil(ctx context.Context, timeout time.Duration, what string, ok func(ctx context.Context) bool) error {
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		return ok(ctx), nil
	})
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("%s not ready after %s", what, timeout)
	}
	return err
}
