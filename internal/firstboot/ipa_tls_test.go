package firstboot

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/ironictls"
	"github.com/bootstick/bootstick/internal/render"
	"github.com/bootstick/bootstick/internal/toolchain"
)

// lookupProgram starts as the agent does (its configuration read as
// ironic-python-agent reads it: oslo.config's folders for that program
// and the kernel's command line) and makes one lookup with the agent's
// own client, at the API URL of the command line. It prints the node's
// UUID the lookup gave, or the agent's own words of why it had none.
const lookupProgram = `import json, sys
sys.argv = ["/usr/bin/ironic-python-agent"]
from oslo_config import cfg
from oslo_log import log
from ironic_python_agent import config, ironic_api_client
CONF = cfg.CONF
log.register_options(CONF)
CONF(args=[])
log.setup(CONF, "ironic-python-agent")
print("insecure=%s cafile=%s" % (CONF.insecure, CONF.cafile), flush=True)
class NIC:
    mac_address = "52:54:00:b0:07:10"
got = ironic_api_client.APIClient(CONF.api_url)._do_lookup({"interfaces": [NIC()]}, None)
print("lookup: " + (got["node"]["uuid"] if got else "none"), flush=True)
`

// TestIPATLSRefusesAnotherCA runs the real deploy ramdisk's agent (its
// Python, from the toolchain's initramfs, in a chroot) against an API
// served with a certificate of the provisioning CA, as Ironic's is. The
// ramdisk is the one firstboot writes (writeDeployRamdisk: the stick's
// initramfs with the CA and the agent's TLS setting appended), unpacked as
// the kernel unpacks it, each archive in turn. Its kernel command line
// asks for ipa-insecure=1, which the appended setting outweighs:
//   - given the provisioning CA, the agent looks itself up and gets its node;
//   - given another CA (another appliance's), it refuses the API's
//     certificate, and the API sees no request: the TLS handshake ends
//     before the agent sends its MACs.
func TestIPATLSRefusesAnotherCA(t *testing.T) {
	if testing.Short() {
		t.Skip("integration: unpacks the toolchain's deploy ramdisk and runs its agent in a chroot (root, make toolchain)")
	}
	if os.Geteuid() != 0 {
		t.Fatal("chroot needs root (make test runs as root)")
	}
	tc, err := toolchain.Open(cas.DefaultRoot())
	if err != nil {
		t.Fatal(err)
	}
	osImages := filepath.Dir(tc.File(render.DeployRamdisk + ".initramfs"))
	ip := netip.MustParseAddr("127.0.0.1")
	ours, err := ironictls.New(rand.Reader, ip, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	other, err := ironictls.New(rand.Reader, ip, time.Now())
	if err != nil {
		t.Fatal(err)
	}

	// Ironic's API as far as a lookup goes, with its certificate from the
	// provisioning CA.
	const nodeUUID = "4b1d6c2e-8f0a-4e55-9c3a-0d7e1f2a3b4c"
	var mu sync.Mutex
	var requests, handshakes []string
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		requests = append(requests, r.URL.String())
		mu.Unlock()
		fmt.Fprint(w, `{"default_version": {"version": "1.96"}}`)
	})
	mux.HandleFunc("GET /v1/lookup", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		requests = append(requests, r.URL.String())
		mu.Unlock()
		json.NewEncoder(w).Encode(map[string]any{
			"node":   map[string]any{"uuid": nodeUUID, "properties": map[string]any{}},
			"config": map[string]any{"heartbeat_timeout": 300, "agent_token": "******"},
		})
	})
	cert, err := tls.X509KeyPair(ours.Cert, ours.Key)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler:   mux,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}},
		ErrorLog: log.New(writerFunc(func(p []byte) (int, error) {
			mu.Lock()
			handshakes = append(handshakes, strings.TrimSpace(string(p)))
			mu.Unlock()
			return len(p), nil
		}), "", 0),
	}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
	api := "https://" + ln.Addr().String()

	// The stick's initramfs unpacked once; each case unpacks its appended
	// archive over it, as the kernel does.
	root := t.TempDir()
	unpack := exec.Command("sh", "-c", `zstd -dc "$1" | cpio -idm --quiet --no-absolute-filenames`, "sh",
		filepath.Join(osImages, render.DeployRamdisk+".initramfs"))
	unpack.Dir = root
	if out, err := unpack.CombinedOutput(); err != nil {
		t.Fatalf("unpacking the deploy ramdisk: %v\n%s", err, out)
	}
	// The kernel's command line, as the agent reads it (/proc is not
	// mounted in the chroot, so this file stands for it).
	if err := os.WriteFile(filepath.Join(root, "proc", "cmdline"),
		[]byte("ipa-insecure=1 ipa-api-url="+api+" ipa-debug=0\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	ctx := context.Background()
	for _, c := range []struct {
		name    string
		ca      []byte
		trusted bool
	}{
		{"the provisioning CA", ours.CA, true},
		{"another CA", other.CA, false},
	} {
		mu.Lock()
		requests, handshakes = nil, nil
		mu.Unlock()

		dir := t.TempDir()
		if err := writeDeployRamdisk(ctx, osImages, dir, c.ca); err != nil {
			t.Fatal(err)
		}
		extra := appendedArchive(t, filepath.Join(osImages, render.DeployRamdisk+".initramfs"),
			filepath.Join(dir, render.DeployRamdisk+".initramfs"))
		over := exec.Command("cpio", "-idmu", "--quiet", "--no-absolute-filenames")
		over.Dir, over.Stdin = root, bytes.NewReader(extra)
		if out, err := over.CombinedOutput(); err != nil {
			t.Fatalf("%s: unpacking the appended archive: %v\n%s", c.name, err, out)
		}

		run := exec.Command("chroot", root, "/usr/bin/python3", "-c", lookupProgram)
		run.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LANG=C.UTF-8"}
		out, err := run.CombinedOutput()
		text := string(out)
		mu.Lock()
		got, hs := requests, handshakes
		mu.Unlock()
		if err != nil {
			t.Fatalf("%s: the agent's lookup: %v\n%s", c.name, err, text)
		}
		if !strings.Contains(text, "insecure=False cafile=/"+ipaCAFile) {
			t.Errorf("%s: the agent's settings are not the appended ones (ipa-insecure=1 is on its command line):\n%s", c.name, text)
		}
		switch {
		case c.trusted:
			if !strings.Contains(text, "lookup: "+nodeUUID) {
				t.Errorf("%s: the agent did not look itself up:\n%s", c.name, text)
			}
			if !slices.ContainsFunc(got, func(u string) bool { return strings.HasPrefix(u, "/v1/lookup?addresses=52%3A54%3A00%3Ab0%3A07%3A10") }) {
				t.Errorf("%s: the API saw %q, want the agent's lookup by its MAC", c.name, got)
			}
			t.Logf("%s: the agent looked itself up over TLS: %q", c.name, got)
		default:
			if !strings.Contains(text, "lookup: none") || !strings.Contains(text, "CERTIFICATE_VERIFY_FAILED") {
				t.Errorf("%s: the agent did not refuse the API's certificate:\n%s", c.name, text)
			}
			if len(got) > 0 {
				t.Errorf("%s: the API saw requests %q: the agent talked to an API its CA did not sign", c.name, got)
			}
			if len(hs) == 0 {
				t.Errorf("%s: the API saw no refused handshake", c.name)
			}
			if i := strings.Index(text, "SSLError"); i >= 0 {
				t.Logf("%s: the agent: %.200s", c.name, text[i:])
			}
			t.Logf("%s: the API: %q", c.name, hs)
		}
	}
}

// appendedArchive is what writeDeployRamdisk appended to base in derived:
// the bytes after base and its padding to 512 bytes.
func appendedArchive(t *testing.T, base, derived string) []byte {
	t.Helper()
	b, err := os.Stat(base)
	if err != nil {
		t.Fatal(err)
	}
	d, err := os.ReadFile(derived)
	if err != nil {
		t.Fatal(err)
	}
	off := (b.Size() + 511) / 512 * 512
	if int64(len(d)) <= off || !bytes.HasPrefix(d[off:], []byte("070701")) {
		t.Fatalf("%s: no cpio archive at %d, after the stick's initramfs", derived, off)
	}
	return d[off:]
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
