package stick

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/testkit"
)

// With --site the site is validated against the bundle (its bundled OS
// image must be in the bundle) and embedded with its credentials files.
func TestSiteEmbedded(t *testing.T) {
	e := newEnv(t, "")
	os.WriteFile(filepath.Join(e.dir, "ubuntu-22.04.raw"), []byte("raw disk"), 0o644)
	o := e.options("nosite.iso")
	o.Site = "../render/testdata/site3.yaml"
	_, err := Build(context.Background(), o)
	if err == nil || !strings.Contains(err.Error(), "site3.yaml") || !strings.Contains(err.Error(), "ubuntu-22.04") ||
		!strings.Contains(err.Error(), `cluster.kudPlugins[0]: Invalid value: "emco": the stick serves no KUD plugins`) {
		t.Fatalf("a site naming an image and plugins the bundle lacks: %v", err)
	}
	noISO(t, e.out)

	// The same site without its KUD plugins (this bundle serves none),
	// beside its credentials file.
	siteDir := t.TempDir()
	site3, _ := os.ReadFile("../render/testdata/site3.yaml")
	creds, _ := os.ReadFile("../render/testdata/creds/worker-1.yaml")
	os.Mkdir(filepath.Join(siteDir, "creds"), 0o755)
	os.WriteFile(filepath.Join(siteDir, "creds", "worker-1.yaml"), creds, 0o600)
	// ... and its BMC CA.
	ca := testCertificate(t)
	os.WriteFile(filepath.Join(siteDir, "bmc-ca.pem"), ca, 0o644)
	site3 = []byte(strings.Replace(string(site3), "  dataDisk:", "  bmcCAFile: bmc-ca.pem\n  dataDisk:", 1))
	os.WriteFile(filepath.Join(siteDir, "site3.yaml"), []byte(strings.Replace(string(site3), "  kudPlugins: [emco, ovn4nfv]\n", "", 1)), 0o600)

	e.bundle, _ = writeBundle(e, "files: [{path: ubuntu-22.04.raw}]\n")
	// Its BMC passwords are in clear text (one inline, one in the
	// credentials file): refused, naming both, without the flag.
	o = e.options("site.iso")
	o.Site = filepath.Join(siteDir, "site3.yaml")
	_, err = Build(context.Background(), o)
	if err == nil || !strings.Contains(err.Error(), "hosts[1].bmc.credentials.password (host master-0)") ||
		!strings.Contains(err.Error(), "creds/worker-1.yaml: password (hosts[0].bmc.credentials.file, host worker-1)") ||
		!strings.Contains(err.Error(), "--allow-cleartext") || strings.Contains(err.Error(), "GoldenMasterPW") {
		t.Fatalf("a site with clear-text BMC passwords, without --allow-cleartext: %v", err)
	}
	noISO(t, e.out)
	o.AllowCleartext = true
	r, err := Build(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	// It carries the site's credentials: only its owner reads it.
	if fi, err := os.Stat(r.Output); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the ISO with a site: %v, mode %v; want 0600", err, fi.Mode().Perm())
	}
	rep, err := Inspect(r.Output)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Site || rep.Build.Site == "" {
		t.Errorf("site not recorded: %+v", rep)
	}
	want, _ := os.ReadFile("../render/testdata/creds/worker-1.yaml")
	if got := mustRead(t, r.Output, "bundle/site/creds/worker-1.yaml"); string(got) != string(want) {
		t.Errorf("credentials file not embedded")
	}
	if got := mustRead(t, r.Output, "bundle/site/bmc-ca.pem"); string(got) != string(ca) {
		t.Errorf("the BMC CA (bootstrap.bmcCAFile) is not embedded")
	}
	if got := mustRead(t, r.Output, "bundle/os-images/ubuntu-22.04.raw.sha256"); !strings.HasPrefix(string(got), cas.DigestOf([]byte("raw disk")).Hex()+"  ubuntu-22.04.raw") {
		t.Errorf("sha256 file %q", got)
	}
}

func writeBundle(e *env, extra string) (string, error) {
	p := filepath.Join(e.dir, "bundle.yaml")
	data, err := os.ReadFile(p)
	if err != nil {
		return "", err
	}
	return p, os.WriteFile(p, append(data, []byte(extra)...), 0o644)
}

// A URL with no sha256 is pinned by the first build (downloaded once);
// a locked build then needs no network for it.
func TestTrustOnFirstUseThenLocked(t *testing.T) {
	data := []byte("unpinned file\n")
	srv, url := serve(t, map[string][]byte{"/extra.bin": data})
	e := newEnv(t, fmt.Sprintf("files: [{url: %q, dest: files}]\n", url+"/extra.bin"))
	r, err := Build(context.Background(), e.options("a.iso"))
	if err != nil {
		t.Fatal(err)
	}
	if r.Lock.Files[0].SHA256 != cas.DigestOf(data) || srv.gets["/extra.bin"] != 1 {
		t.Fatalf("lock %+v gets %v", r.Lock.Files, srv.gets)
	}
	o := e.options("b.iso")
	o.Locked = true
	if _, err := Build(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	if srv.gets["/extra.bin"] != 1 {
		t.Errorf("the locked build downloaded again: %v", srv.gets)
	}
}

// testCertificate is a PEM self-signed CA certificate.
func testCertificate(t *testing.T) []byte {
	t.Helper()
	cert, _, err := testkit.CA("BMC CA")
	if err != nil {
		t.Fatal(err)
	}
	return cert
}
