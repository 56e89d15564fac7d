package install

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestFetchUnpacksTheStickCopies runs the install's first part (fetch.sh,
// as install.sh includes it) with bash, curl, sha256sum and zstd against a
// web server standing for the stick's /packages/: a binary the lock gives
// a zstd copy of is fetched as NAME.zst, unpacked and checked, and only
// the binary stays; a .deb comes as it is. A second run fetches nothing.
// A copy that unpacks to other bytes fails, naming the binary, and leaves
// no file under its name.
func TestFetchUnpacksTheStickCopies(t *testing.T) {
	kubeadm := bytes.Repeat([]byte("kubeadm binary "), 20000)
	deb := []byte("a .deb's bytes")
	zst := func(b []byte) []byte {
		cmd := exec.Command("zstd", "-q", "-c")
		cmd.Stdin = bytes.NewReader(b)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("zstd: %v", err)
		}
		return out
	}
	files := map[string][]byte{"kubeadm.zst": zst(kubeadm), "containerd_1.7.24_amd64.deb": deb, "kubelet.zst": zst([]byte("not kubelet"))}
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.StripPrefix("/packages/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.URL.Path)
		mu.Unlock()
		b, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Write(b)
	})))
	defer srv.Close()
	hexsum := func(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

	run := func(c *Config, dir string) (string, error) {
		t.Helper()
		body, err := render("fetch.sh", map[string]any{"PackagesURL": c.PackagesURL, "Debs": c.Debs, "Binaries": c.Binaries})
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("bash", "-euo", "pipefail")
		cmd.Stdin = strings.NewReader("dir=" + shellQuote(dir) + "\n" + body)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	c := &Config{PackagesURL: srv.URL + "/packages/",
		Debs:     []Deb{{Name: "containerd", File: "containerd_1.7.24_amd64.deb", SHA256: hexsum(deb)}},
		Binaries: []Binary{{Name: "kubeadm", SHA256: hexsum(kubeadm), Zstd: hexsum(files["kubeadm.zst"])}}}
	dir := t.TempDir()
	if out, err := run(c, dir); err != nil {
		t.Fatalf("fetch: %v\n%s", err, out)
	}
	for name, want := range map[string][]byte{"kubeadm": kubeadm, "containerd_1.7.24_amd64.deb": deb} {
		if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || !bytes.Equal(b, want) {
			t.Errorf("%s: %d bytes, %v; want %d bytes", name, len(b), err, len(want))
		}
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*.zst*")); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
	if want := []string{"containerd_1.7.24_amd64.deb", "kubeadm.zst"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("fetched %q, want %q", got, want)
	}
	got = nil
	if out, err := run(c, dir); err != nil || len(got) > 0 {
		t.Errorf("again: %v, fetched %q\n%s", err, got, out)
	}

	// A copy that unpacks to other bytes than the lock's.
	bad := &Config{PackagesURL: c.PackagesURL,
		Binaries: []Binary{{Name: "kubelet", SHA256: hexsum([]byte("kubelet")), Zstd: hexsum(files["kubelet.zst"])}}}
	out, err := run(bad, dir)
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 || !strings.Contains(out, "kubelet, unpacked from kubelet.zst, does not match its checksum in the stick's lock") {
		t.Errorf("a damaged copy: %v\n%s", err, out)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "kubelet*")); len(left) > 0 {
		t.Errorf("a damaged copy left %v", left)
	}
}
