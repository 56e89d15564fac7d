package containerd

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/random"

	"github.com/bootstick/bootstick/internal/registry"
)

// Debian's containerd 1.6 accepts the rendered config, loads the CRI plugin,
// and pulls an image by its original name through the bundle's registry.
func TestDebianContainerdPullsThroughMirror(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the real containerd (root; Debian packages containerd and runc)")
	}
	bin, err := exec.LookPath("containerd")
	if err != nil {
		t.Fatalf("%v: apt-get install containerd runc", err)
	}
	ctr, err := exec.LookPath("ctr")
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	lay := filepath.Join(tmp, "oci")
	lp, err := layout.Write(lay, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	img, _ := random.Image(4096, 2)
	const ref = "registry.example/team/app:v1"
	lp.AppendImage(img, layout.WithAnnotations(map[string]string{registry.AnnotationImageName: ref}))
	var access bytes.Buffer
	srv, err := registry.Open(lay, registry.Options{AccessLog: &access})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	defer ts.Close()

	// A short run folder: unix socket paths are limited to 108 bytes.
	run, err := os.MkdirTemp("/run", "bst-test-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(run)
	c := HostPaths(filepath.Join(tmp, "data"), run, filepath.Join(tmp, "etc"))
	c.SandboxImage = ref
	c.RestrictOOMScoreAdj, _ = NeedsRestrictOOMScoreAdj()
	hosts, err := HostsFiles(srv.Registries(), []string{ts.URL})
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(tmp, "etc", "containerd", "config.toml")
	if err := WriteFiles(cfg, c, hosts); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	cmd := exec.Command(bin, "--config", cfg)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		exec.Command("umount", "-R", c.Root).Run()
	}()
	if err := WaitReady(context.Background(), c.Address, 30*time.Second); err != nil {
		t.Fatalf("%v\n%s", err, logs.String())
	}
	out, err := exec.Command(ctr, "--address", c.Address, "plugins", "ls").CombinedOutput()
	if err != nil || !regexpLine(string(out), "io.containerd.grpc.v1", "cri", "ok") {
		t.Fatalf("the CRI plugin did not load: %v\n%s\n%s", err, out, logs.String())
	}
	out, err = exec.Command(ctr, "--address", c.Address, "-n", "k8s.io", "images", "pull", "--hosts-dir", c.HostsDir, ref).CombinedOutput()
	if err != nil {
		t.Fatalf("ctr pull: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "hosts.toml") || strings.Contains(string(out), "next host") {
		t.Errorf("containerd did not take the hosts.toml as it is:\n%s", out)
	}
	if !strings.Contains(access.String(), `"ns":"registry.example","repo":"team/app"`) {
		t.Errorf("the pull did not go through the mirror with ns:\n%s", access.String())
	}
}

func regexpLine(out string, fields ...string) bool {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 4 && f[0] == fields[0] && f[1] == fields[1] && f[len(f)-1] == fields[2] {
			return true
		}
	}
	return false
}
