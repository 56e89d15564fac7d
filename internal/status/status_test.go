package status

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bootstick/bootstick/internal/pipeline"
)

var update = flag.Bool("update", false, "rewrite the golden files")

var t0 = time.Date(2025, 6, 1, 10, 0, 0, 0, time.UTC)

func rec(name, state string, secs float64, errText string) pipeline.StepRecord {
	r := pipeline.StepRecord{Name: name, State: state, Error: errText}
	if state != pipeline.StatePending {
		r.Started, r.Attempts = t0, 1
		r.Duration = time.Duration(secs * float64(time.Second))
		r.Ended = t0.Add(r.Duration)
	}
	return r
}

func TestBuildPhases(t *testing.T) {
	tests := []struct {
		name    string
		steps   []pipeline.StepRecord
		running bool
		want    string
	}{
		{"empty", nil, false, "not started"},
		{"all pending", []pipeline.StepRecord{rec("a", pipeline.StatePending, 0, "")}, false, "not started"},
		{"done", []pipeline.StepRecord{rec("a", pipeline.StateDone, 1, "")}, false, "done"},
		{"failed", []pipeline.StepRecord{rec("a", pipeline.StateDone, 1, ""), rec("b", pipeline.StateFailed, 1, "x")}, false, "failed"},
		{"running", []pipeline.StepRecord{rec("a", pipeline.StateRunning, 0, "")}, true, "running"},
		{"interrupted", []pipeline.StepRecord{rec("a", pipeline.StateRunning, 0, "")}, false, "interrupted"},
		{"incomplete", []pipeline.StepRecord{rec("a", pipeline.StateDone, 1, ""), rec("b", pipeline.StatePending, 0, "")}, false, "incomplete"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Build(Input{State: &pipeline.State{Version: 1, Steps: tt.steps}, Running: tt.running, HolderPID: 42})
			if r.Phase != tt.want {
				t.Errorf("phase %q, want %q", r.Phase, tt.want)
			}
		})
	}
}

func failedState() *pipeline.State {
	failed := rec("containerd", pipeline.StateFailed, 12.4, "containerd at /run/bootstick/containerd/containerd.sock not ready after 30s")
	failed.Hint = "see /run/bootstick/services/bootstick-containerd.log"
	return &pipeline.State{Version: 1, Started: t0, Steps: []pipeline.StepRecord{
		rec("preflight", pipeline.StateDone, 0.2, ""),
		rec("registry", pipeline.StateDone, 1.26, ""),
		failed,
		rec("kubeadm-init", pipeline.StatePending, 0, ""),
	}}
}

func TestReportText(t *testing.T) {
	r := Build(Input{State: failedState(),
		Problems: []string{"corrupted blob sha256:abc in the bundle's registry"}})
	var b bytes.Buffer
	r.WriteText(&b)
	p := filepath.Join("testdata", "failed.txt")
	if *update {
		os.WriteFile(p, b.Bytes(), 0o644)
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (run with -update)", err)
	}
	if !bytes.Equal(b.Bytes(), want) {
		t.Errorf("differs from %s:\n%s", p, b.String())
	}
}

// TestReportNodeAddress: the node's line names its address (the
// provisioning address on a site with no router).
func TestReportNodeAddress(t *testing.T) {
	for _, c := range []struct {
		cluster Cluster
		want    string
	}{
		{Cluster{Node: "bootstick", NodeAddress: "172.22.0.1", NodeReady: true}, "node bootstick at 172.22.0.1: Ready\n"},
		{Cluster{Node: "bootstick"}, "node bootstick: NotReady\n"},
	} {
		r := Build(Input{State: failedState()})
		r.Cluster = &c.cluster
		var b bytes.Buffer
		r.WriteText(&b)
		if !strings.Contains(b.String(), c.want) {
			t.Errorf("status shows no %q:\n%s", c.want, b.String())
		}
	}
}

// TestReportHostsShowDriver: each host's row and JSON carry its BMC's
// hardware type, boot mode and boot interface.
func TestReportHostsShowDriver(t *testing.T) {
	r := Build(Input{State: failedState()})
	r.Hosts = []Host{
		{Name: "node-0", Role: "master", BMC: "ipmi://172.22.0.2:6230", MAC: "52:54:00:b0:07:10", State: "provisioned",
			BMCType: "ipmi", BootMode: "legacy", BootInterface: "ipxe"},
		{Name: "node-1", Role: "worker", BMC: "redfish+https://172.22.0.2:8000/redfish/v1/Systems/node-1", MAC: "52:54:00:b0:07:11",
			State: "provisioning", BMCType: "redfish", BootMode: "UEFI", BootInterface: "ipxe"},
		{Name: "node-2", Role: "worker", BMC: "ipmi://172.22.0.2:6232", MAC: "52:54:00:b0:07:12"},
	}
	var b bytes.Buffer
	r.WriteText(&b)
	rows := map[string][]string{}
	for _, l := range strings.Split(b.String(), "\n") {
		if f := strings.Fields(l); len(f) > 5 {
			rows[f[0]] = f
		}
	}
	if h := rows["HOST"]; len(h) < 5 || h[3] != "TYPE" || h[4] != "BOOT" {
		t.Fatalf("header %v, want TYPE and BOOT after BMC:\n%s", h, b.String())
	}
	for name, want := range map[string][2]string{"node-0": {"ipmi", "legacy/ipxe"}, "node-1": {"redfish", "UEFI/ipxe"}, "node-2": {"-", "-"}} {
		if f := rows[name]; len(f) < 5 || f[3] != want[0] || f[4] != want[1] {
			t.Errorf("%s: row %v, want %s %s", name, f, want[0], want[1])
		}
	}
	b.Reset()
	if err := r.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if h := back.Hosts[1]; h.BMCType != "redfish" || h.BootMode != "UEFI" || h.BootInterface != "ipxe" {
		t.Errorf("JSON lost node-1's driver: %+v", h)
	}
}

func TestReportJSON(t *testing.T) {
	r := Build(Input{State: failedState()})
	var b bytes.Buffer
	if err := r.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back.Phase != "failed" || back.LastError == nil || back.LastError.Step != "containerd" || back.LastError.Hint == "" {
		t.Errorf("round trip lost the failure: %+v", back)
	}
	if back.Steps[1].DurationSeconds != 1.26 {
		t.Errorf("duration %v, want 1.26", back.Steps[1].DurationSeconds)
	}
}

func TestConsoleBanner(t *testing.T) {
	p := filepath.Join(t.TempDir(), "issue.d", "bootstick.issue")
	c := &Console{Path: p, Address: `https://192.0.2.10:6443`}
	c.Update(pipeline.Event{Step: "kubeadm-init", Index: 6, Total: 11, Phase: pipeline.PhaseStarted})
	got, _ := os.ReadFile(p)
	for _, want := range []string{"in progress", "step 6/11: kubeadm-init", "cluster: https://192.0.2.10:6443"} {
		if !strings.Contains(string(got), want) {
			t.Errorf("banner lacks %q:\n%s", want, got)
		}
	}
	c.Update(pipeline.Event{Step: "site", Index: 12, Total: 13, Phase: pipeline.PhaseProgress, Detail: "hosts: 1 provisioned, 2 registering (2 with an error: firstboot status)"})
	got, _ = os.ReadFile(p)
	if !strings.Contains(string(got), "in progress") || !strings.Contains(string(got), "step 12/13: site: hosts: 1 provisioned, 2 registering") {
		t.Errorf("the banner does not count the hosts by state:\n%s", got)
	}
	c.Update(pipeline.Event{Step: "containerd", Index: 5, Total: 11, Phase: pipeline.PhaseFailed, Err: errors.New(`bad \path`)})
	got, _ = os.ReadFile(p)
	if !strings.Contains(string(got), "FAILED") || !strings.Contains(string(got), `bad \\path`) {
		t.Errorf("failure banner (with escaped backslash):\n%s", got)
	}
	c.Update(pipeline.Event{Step: "done", Index: 11, Total: 11, Phase: pipeline.PhaseDone})
	got, _ = os.ReadFile(p)
	if !strings.Contains(string(got), ": ready") || !strings.Contains(string(got), "\n  hosts: 1 provisioned, 2 registering") {
		t.Errorf("final banner (with the hosts by state):\n%s", got)
	}
}

func TestNotifierSendsStatus(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Setenv("NOTIFY_SOCKET", sock)
	n := NewNotifier(context.Background())
	if v, ok := os.LookupEnv("NOTIFY_SOCKET"); ok {
		t.Errorf("NOTIFY_SOCKET=%s is still in the environment: children would inherit it", v)
	}
	n.Update(pipeline.Event{Step: "registry", Index: 4, Total: 11, Phase: pipeline.PhaseDone, Duration: 1234 * time.Millisecond})
	n.Ready("node ready")
	buf := make([]byte, 1024)
	var got []string
	for range 2 {
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		k, err := conn.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(buf[:k]))
	}
	if got[0] != "STATUS=step 4/11: registry done in 1.2s" || got[1] != "READY=1\nSTATUS=node ready" {
		t.Errorf("notifications %q", got)
	}
}

func TestHostReasonSaysWhatToDo(t *testing.T) {
	for _, c := range []struct{ typ, msg, want string }{
		{"registration error", "Failed to get power state for node 1be26c0b. Error: IPMI call failed: power status.", "check the host's bmc.address and bmc.credentials"},
		{"registration error", "RAKP 2 message indicates an error : unauthorized name", "refused the user name or password"},
		{"inspection error", "Timeout reached while inspecting the node", "bootMACAddress"},
		{"provisioning error", "Image checksum mismatch: expected 9f86d0, got 2c26b4", "image.checksum"},
		{"", "", ""},
	} {
		got := HostReason(c.typ, c.msg)
		if !strings.Contains(got, c.want) || c.want != "" && !strings.Contains(got, c.typ) {
			t.Errorf("HostReason(%q, %q) = %q, want it to say %q", c.typ, c.msg, got, c.want)
		}
	}
}

func TestBMCReasonTellsSilenceFromRefusal(t *testing.T) {
	msg := "Failed to get power state for node 1be26c0b. Error: IPMI call failed: power status."
	if got := BMCReason("ipmi://192.0.2.1:623", true, msg); !strings.HasPrefix(got, "registration error: the BMC at ipmi://192.0.2.1:623 answers but refuses") || !strings.HasSuffix(got, "("+msg+")") {
		t.Errorf("a BMC that answers: %q", got)
	}
	if got := BMCReason("ipmi://192.0.2.1:623", false, msg); !strings.HasPrefix(got, "registration error: nothing answers at ipmi://192.0.2.1:623: check the host's bmc.address") {
		t.Errorf("a BMC that does not answer: %q", got)
	}
	// A Redfish BMC whose certificate this machine does not trust answers
	// too, but its credentials were never tried: the site's BMC CA is
	// what to fix (sushy's words, through requests).
	tls := "Failed to get power state for node 1be26c0b. Error: Redfish connection failed for node 1be26c0b: HTTPSConnectionPool(host='192.0.2.5', port=443): Max retries exceeded (Caused by SSLError(SSLCertVerificationError(1, '[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate in certificate chain (_ssl.c:1028)')))"
	if got := BMCReason("redfish://192.0.2.5/redfish/v1/Systems/1", true, tls); !strings.HasPrefix(got, "registration error: this machine does not trust the BMC's HTTPS certificate: give the CA that signed it (or the BMC's own certificate) in the site's bootstrap.bmcCAFile") {
		t.Errorf("a BMC whose certificate is not trusted: %q", got)
	}
}

// TestReportDHCP: status says which machines DHCP answers, how many MACs
// its host list answers and refuses, and where the refusals are.
func TestReportDHCP(t *testing.T) {
	for _, c := range []struct {
		dhcp DHCP
		want string
	}{
		{DHCP{Hosts: "site", Answers: []string{"52:54:00:b0:07:10", "52:54:00:b0:07:11"}, Refuses: []string{"52:54:00:b0:07:1a"}},
			`DHCP: the site's hosts only (dhcpHosts: site): answers 2 MACs, refuses 1 and every other MAC, each refusal logged as "ignored" (kubectl -n ironic logs deploy/ironic -c dnsmasq)` + "\n"},
		{DHCP{Hosts: "any", Refuses: []string{"52:54:00:b0:07:1a"}}, "DHCP: any machine (dhcpHosts: any): answers every MAC but 1 refused\n"},
		{DHCP{Hosts: "site", Error: "reading the DHCP host list: permission denied"}, "DHCP: reading the DHCP host list: permission denied\n"},
	} {
		r := Build(Input{State: failedState()})
		r.Cluster = &Cluster{Node: "bootstick", NodeReady: true, DHCP: &c.dhcp}
		var b bytes.Buffer
		r.WriteText(&b)
		if !strings.Contains(b.String(), c.want) {
			t.Errorf("status shows no %q:\n%s", c.want, b.String())
		}
	}
}
