package firstboot

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/random"

	"github.com/bootstick/bootstick/internal/pipeline"
	"github.com/bootstick/bootstick/internal/registry"
	"github.com/bootstick/bootstick/internal/site"
	"github.com/bootstick/bootstick/internal/sitestep"
)

func TestCNIConfig(t *testing.T) {
	var cfg struct {
		CNIVersion string `json:"cniVersion"`
		Plugins    []struct {
			Type   string `json:"type"`
			Bridge string `json:"bridge"`
			IPAM   struct {
				Ranges [][]struct{ Subnet string } `json:"ranges"`
			} `json:"ipam"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(cniConfig("10.244.0.0/16"), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Plugins[0].Type != "bridge" || cfg.Plugins[0].Bridge != cniBridge || cfg.Plugins[0].IPAM.Ranges[0][0].Subnet != "10.244.0.0/16" {
		t.Errorf("conflist %+v", cfg)
	}
}

func TestKubeletFlags(t *testing.T) {
	p := filepath.Join(t.TempDir(), "kubeadm-flags.env")
	os.WriteFile(p, []byte(`KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///run/x.sock --node-ip=192.0.2.10 --pod-infra-container-image=r.example/pause:3.10"`+"\n"), 0o644)
	got, err := kubeletFlags(p)
	if err != nil || len(got) != 3 || got[1] != "--node-ip=192.0.2.10" {
		t.Errorf("kubeletFlags = %q, %v", got, err)
	}
	if _, err := kubeletFlags(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("a missing flags file is not an error")
	}
}

// The registry subcommand refuses a corrupted blob, records it, and
// `firstboot status` names it.
func TestRegistryCommandAndStatusNameCorruptBlob(t *testing.T) {
	dir := t.TempDir()
	lay := filepath.Join(dir, "oci")
	lp, err := layout.Write(lay, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	img, _ := random.Image(1<<20, 1)
	lp.AppendImage(img, layout.WithAnnotations(map[string]string{registry.AnnotationImageName: "registry.example/app:v1"}))
	layers, _ := img.Layers()
	ld, _ := layers[0].Digest()
	blob := filepath.Join(lay, "blobs", "sha256", ld.Hex)
	data, _ := os.ReadFile(blob)
	data[100] ^= 0xff
	os.WriteFile(blob, data, 0o644)

	p := defaultPaths(filepath.Join(dir, "data"))
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr := freeAddr(t)
	go func() { done <- serveRegistry(ctx, lay, []string{addr}, p.registryLog(), p.corruptFile()) }()
	waitHTTP(t, "http://"+addr+"/v2/")
	resp, err := http.Get("http://" + addr + "/v2/app/blobs/" + ld.String() + "?ns=registry.example")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if len(body) >= len(data) {
		t.Errorf("a corrupted blob was served whole (%d bytes)", len(body))
	}
	cancel()
	<-done

	os.MkdirAll(p.State, 0o755)
	pipeline.SaveState(pipeline.StatePath(p.State), &pipeline.State{Version: pipeline.StateVersion,
		Steps: []pipeline.StepRecord{{Name: "registry", State: pipeline.StateDone}, {Name: "kubeadm-init", State: pipeline.StateFailed, Error: "pulling app: unexpected EOF"}}})
	r, err := buildStatus(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Problems) != 1 || !strings.Contains(r.Problems[0], ld.String()) {
		t.Errorf("status problems %q do not name the blob %s", r.Problems, ld)
	}
	if r.LastError == nil || r.LastError.Step != "kubeadm-init" {
		t.Errorf("status last error %+v", r.LastError)
	}
	log, _ := os.ReadFile(p.registryLog())
	if !strings.Contains(string(log), ld.String()) || !strings.Contains(string(log), "corrupted") {
		t.Errorf("access log does not name the corrupted blob:\n%s", log)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := ln.Addr().String()
	ln.Close()
	return a
}

func waitHTTP(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s never answered", url)
}

// TestHostRowShowsDriver: before the cluster answers, status shows each
// site host with the hardware type and boot interface its BMC address is
// registered with, and the site's boot mode.
func TestHostRowShowsDriver(t *testing.T) {
	for _, c := range []struct {
		h                    sitestep.Host
		typ, mode, bootIface string
	}{
		{sitestep.Host{Name: "n0", BMC: "ipmi://172.22.0.2:6230", BootMode: "legacy"}, "ipmi", "legacy", "ipxe"},
		{sitestep.Host{Name: "n1", BMC: "redfish+https://10.0.0.5/redfish/v1/Systems/1", BootMode: "UEFI"}, "redfish", "UEFI", "ipxe"},
		{sitestep.Host{Name: "n2", BMC: "redfish-virtualmedia://10.0.0.5/redfish/v1/Systems/1", BootMode: "UEFI"}, "redfish", "UEFI", "redfish-virtual-media"},
	} {
		if r := hostRow(c.h); r.BMCType != c.typ || r.BootMode != c.mode || r.BootInterface != c.bootIface || r.BMC != c.h.BMC {
			t.Errorf("%s: row %+v, want %s %s/%s", c.h.Name, r, c.typ, c.mode, c.bootIface)
		}
	}
}

// TestStatusNotesUnservedDevices: status goes on saying what the site asks
// that no device plugin on the stick serves, by host, from the hosts the
// site step recorded.
func TestStatusNotesUnservedDevices(t *testing.T) {
	p := defaultPaths(t.TempDir())
	if err := os.MkdirAll(p.State, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := pipeline.SaveState(pipeline.StatePath(p.State), &pipeline.State{Version: pipeline.StateVersion}); err != nil {
		t.Fatal(err)
	}
	if err := sitestep.WriteHosts(p.hostsFile(), []sitestep.Host{{Name: "master-0", Role: "master"},
		{Name: "worker-0", Role: "worker", Requires: []string{site.DeviceSRIOV, site.DeviceQAT}}}); err != nil {
		t.Fatal(err)
	}
	r, err := buildStatus(p)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"\nnote: worker-0 requires SR-IOV: the BPA places it only on a host whose NIC offers SR-IOV virtual functions, but this stick carries no SR-IOV network device plugin",
		"\nnote: worker-0 requires QAT: the BPA places it only on a host with an Intel QAT device, but this stick carries no QAT device plugin",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, b.String())
		}
	}
	if len(r.Notes) != 2 {
		t.Errorf("status notes %q, want worker-0's two", r.Notes)
	}
}
