package firstboot

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/bootstick/bootstick/internal/bundle"
	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/config"
	"github.com/bootstick/bootstick/internal/iso"

	"github.com/bootstick/bootstick/internal/render"
	"github.com/bootstick/bootstick/internal/site/sitetest"
)

// runCLI runs firstboot with args and returns the exit code, stdout and
// stderr (which carries the logs, at debug level).
func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	t.Setenv("BOOTSTICK_DEBUG", "1")
	var out, errb bytes.Buffer
	old := siteOut
	siteOut = &out
	defer func() { siteOut = old }()
	code := NewApp().Run(context.Background(), args, &errb)
	return code, out.String(), errb.String()
}

func testBundle(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	lock := &bundle.Lock{APIVersion: config.APIVersion, Kind: bundle.LockKind, Files: []bundle.LockedFile{
		{Name: "ubuntu-22.04.qcow2", Dest: "os-images", Source: "url", SHA256: cas.DigestOf([]byte("not really an image"))},
		{Name: "debian-13-compute.qcow2", Dest: "os-images", Source: "toolchain", SHA256: cas.DigestOf([]byte("nor is this"))}}}
	// The pod network, as the default stick carries it.
	lock.Packages.Binaries = []bundle.LockedFile{{Name: "flannel", Dest: "packages", Source: "toolchain", SHA256: cas.DigestOf([]byte("cni"))}}
	lock.Images = []bundle.LockedImage{{Ref: "docker.io/flannel/flannel:v0.27.4", Source: "toolchain", Digest: cas.DigestOf([]byte("image"))}}
	if err := bundle.WriteLock(filepath.Join(dir, "bundle.lock"), lock); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestValidateBadSites runs every bad site of internal/site/sitetest
// through the command line: exit code 1, the expected text on stderr,
// nothing on stdout, no panic.
func TestValidateBadSites(t *testing.T) {
	sites, err := sitetest.Write(t.TempDir(), "../../internal/site/testdata/good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(sites) < 125 {
		t.Fatalf("only %d bad sites", len(sites))
	}
	bundle := testBundle(t)
	for _, s := range sites {
		for _, cmd := range []string{"validate", "render"} {
			t.Run(cmd+"/"+s.Name, func(t *testing.T) {
				code, out, errs := runCLI(t, cmd, "--site", s.Path, "--bundle", bundle)
				if code != 1 {
					t.Fatalf("%s: exit code %d, want 1; stderr:\n%s", s.Path, code, errs)
				}
				if !strings.Contains(errs, s.Want) {
					t.Fatalf("%s: stderr:\n%s\nwant it to name %q", s.Path, errs, s.Want)
				}
				if out != "" {
					t.Fatalf("%s: printed to stdout for a bad site:\n%s", s.Path, out)
				}
				if strings.Contains(errs, "panic") || strings.Contains(errs, "goroutine ") {
					t.Fatalf("%s: panicked:\n%s", s.Path, errs)
				}
			})
		}
	}
}

// TestKernelSettingsOnTheStick: every kernel setting firstboot's
// preflight sets is in the stick's sysctl.d too, with the same value, so
// a booted stick has it from its first moment and after every reboot.
func TestKernelSettingsOnTheStick(t *testing.T) {
	conf, err := os.ReadFile("../../overlay/etc/sysctl.d/90-bootstick.conf")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(conf), "\n")
	for k, v := range kernelSettings {
		if want := strings.ReplaceAll(k, "/", ".") + " = " + v; !slices.Contains(lines, want) {
			t.Errorf("overlay/etc/sysctl.d/90-bootstick.conf has no line %q", want)
		}
	}
}

// TestReadmeShowsTheExample: the README's commented site is
// examples/site.yaml, byte for byte.
func TestReadmeShowsTheExample(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile("../../examples/site.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "(`examples/site.yaml`):\n\n```yaml\n")
	block, _, closed := strings.Cut(block, "```")
	if !ok || !closed {
		t.Fatal("the README shows no examples/site.yaml in a yaml block")
	}
	if block != string(example) {
		t.Errorf("the README's example site differs from examples/site.yaml: copy the file into the README")
	}
}

func TestValidateAndRenderExample(t *testing.T) {
	bundle := testBundle(t)
	code, out, errs := runCLI(t, "validate", "--site", "../../examples/site.yaml", "--bundle", bundle)
	if code != 0 || !strings.Contains(out, "valid: cluster site-a, 3 hosts (1 masters, 2 workers)") {
		t.Fatalf("validate: code %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	// worker-0 requires SR-IOV and QAT: valid, and validate says plainly
	// that no pod on this stick can request either.
	for _, want := range []string{
		"\nnote: worker-0 requires SR-IOV (hosts[1].requirements.sriov): the BPA places it only on a host whose NIC offers SR-IOV virtual functions, but this stick carries no SR-IOV network device plugin",
		"\nnote: worker-0 requires QAT (hosts[1].requirements.qat): the BPA places it only on a host with an Intel QAT device, but this stick carries no QAT device plugin",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("validate's output lacks %q:\n%s", want, out)
		}
	}
	if strings.Count(out, "note: ") != 2 {
		t.Errorf("validate's output has other notes than worker-0's two:\n%s", out)
	}
	keys := t.TempDir()
	code, out, errs = runCLI(t, "render", "--site", "../../examples/site.yaml", "--bundle", bundle, "--ssh-key-dir", keys)
	if code != 0 || strings.Count(out, "kind: BareMetalHost") != 3 || strings.Count(out, "kind: Provisioning") != 1 {
		t.Fatalf("render: code %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	// The README's own commands, exactly as it shows them (no --bundle).
	for _, cmd := range [][]string{{"validate", "--site", "../../examples/site.yaml"}, {"render", "--site", "../../examples/site.yaml"}} {
		code, out, errs = runCLI(t, cmd...)
		if code != 0 {
			t.Errorf("firstboot %v: code %d\nstdout:\n%s\nstderr:\n%s", cmd, code, out, errs)
		}
	}
	// Two hosts name the bundled image, one its URL.
	if strings.Count(out, "url: http://172.22.0.1:6180/images/debian-13-compute.qcow2") != 3 || !strings.Contains(errs, "no --bundle") {
		t.Errorf("render without --bundle does not render the bundled image by name, or does not say so:\n%s\n%s", out, errs)
	}
	// Usage errors exit 2.
	if code, _, _ := runCLI(t, "render"); code != 2 {
		t.Fatalf("render without --site: exit code %d, want 2", code)
	}
}

// TestValidateBundleISO: validate and render take a stick's ISO file as
// the bundle, read where it lies (no mount, no root): the example site
// validates against the lock in its /bundle, a site naming an image the
// stick does not carry is refused with its field path, and a file that is
// no ISO is named as such.
func TestValidateBundleISO(t *testing.T) {
	tree := t.TempDir()
	if err := os.Rename(testBundle(t), filepath.Join(tree, "bundle")); err != nil {
		t.Fatal(err)
	}
	isoPath := filepath.Join(t.TempDir(), "stick.iso")
	if err := iso.Write(context.Background(), iso.Options{Tree: tree, Output: isoPath, Label: "BOOTSTICK"}); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCLI(t, "validate", "--site", "../../examples/site.yaml", "--bundle", isoPath)
	if code != 0 || !strings.Contains(out, "valid: cluster site-a") {
		t.Errorf("validate --bundle %s: code %d\n%s\n%s", isoPath, code, out, errs)
	}
	example, err := os.ReadFile("../../examples/site.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.CopyFS(filepath.Join(dir, "secrets"), os.DirFS("../../examples/secrets")); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "site.yaml")
	if err := os.WriteFile(other, []byte(strings.Replace(string(example), "bundled: debian-13-compute", "bundled: rocky-9", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errs = runCLI(t, "validate", "--site", other, "--bundle", isoPath)
	if code != 1 || !strings.Contains(errs, "hosts[0].image.bundled") || !strings.Contains(errs, "rocky-9") {
		t.Errorf("validate of a site naming an image the stick lacks: code %d\n%s", code, errs)
	}
	code, _, errs = runCLI(t, "validate", "--site", "../../examples/site.yaml", "--bundle", other)
	if code == 0 || !strings.Contains(errs, "neither a folder nor an ISO file") {
		t.Errorf("validate with a YAML file as the bundle: code %d\n%s", code, errs)
	}
}

// TestSecretsNeverLeak greps everything firstboot validate and render
// print, on success and on failure, logs included, for the BMC passwords
// and the SSH private key.
func TestSecretsNeverLeak(t *testing.T) {
	bundle := testBundle(t)
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	example, err := os.ReadFile("../../examples/site.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const pw1, pw2, pw3 = "LeakMe-Master-7x", "LeakMe-Worker-9y", "LeakMe-File-3z"
	good := strings.NewReplacer("change-me-too", pw2, "change-me", pw1).Replace(string(example))
	if err := os.MkdirAll(filepath.Join(dir, "secrets"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "secrets", "worker-1.yaml"), []byte("username: root\npassword: "+pw3+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	goodPath := write("good.yaml", good)
	bad := []string{
		// A password in the BMC URL, a broken document around a password,
		// a password where a number goes, duplicate keys, unknown fields.
		write("userinfo.yaml", strings.Replace(good, "ipmi://10.10.1.10:623", "ipmi://admin:"+pw1+"@10.10.1.10:623", 1)),
		write("url-broken.yaml", strings.Replace(good, "ipmi://10.10.1.10:623", "ipmi://admin:"+pw1+"@[::1", 1)),
		write("typed.yaml", strings.Replace(good, "cpu: 16", "cpu: "+pw1, 1)),
		write("dup.yaml", strings.Replace(good, "      password: "+pw1, "      password: "+pw1+"\n      password: "+pw1, 1)),
		write("unknown.yaml", strings.Replace(good, "      password: "+pw1, "      pasword: "+pw1, 1)),
		write("seq.yaml", strings.Replace(good, "      password: "+pw1, "      password: ["+pw1+"]", 1)),
		write("tab.yaml", strings.Replace(good, "      password: "+pw1, "      password: \""+pw1, 1)),
		write("encrypted.yaml", strings.Replace(good, "      password: "+pw1, "      encryptedPassword: "+pw1, 1)),
		write("key-in-keys.yaml", strings.Replace(good, "- ssh-ed25519 AAAAC3Nza", "- "+pw1+"AAAAC3Nza", 1)),
	}
	var all strings.Builder
	run := func(args ...string) int {
		code, out, errs := runCLI(t, args...)
		all.WriteString(out)
		all.WriteString(errs)
		return code
	}
	if code := run("validate", "--site", goodPath, "--bundle", bundle); code != 0 {
		t.Fatalf("validate good site: %d\n%s", code, all.String())
	}
	if code := run("render", "--site", goodPath, "--bundle", bundle, "--ssh-key-dir", keys); code != 0 {
		t.Fatalf("render good site: %d\n%s", code, all.String())
	}
	for _, b := range bad {
		if code := run("validate", "--site", b, "--bundle", bundle); code != 1 {
			t.Errorf("validate %s: exit code %d, want 1", b, code)
		}
		if code := run("render", "--site", b, "--bundle", bundle, "--ssh-key-dir", keys); code != 1 {
			t.Errorf("render %s: exit code %d, want 1", b, code)
		}
	}
	private, err := os.ReadFile(filepath.Join(keys, "id_ed25519"))
	if err != nil {
		t.Fatal(err)
	}
	text := all.String()
	for _, needle := range render.LeakNeedles([]string{pw1, pw2, pw3}, private) {
		if strings.Contains(text, needle) {
			t.Errorf("output or logs contain the secret %q", needle)
		}
	}
	if !strings.Contains(text, "kind: BareMetalHost") || !strings.Contains(text, "problem") {
		t.Fatalf("the commands did not run as expected:\n%s", text)
	}
}

func TestBundledImages(t *testing.T) {
	dir := t.TempDir()
	lock := &bundle.Lock{APIVersion: config.APIVersion, Kind: bundle.LockKind, Files: []bundle.LockedFile{
		{Name: "ubuntu-22.04.qcow2", Dest: "os-images", Source: "url", SHA256: cas.DigestOf([]byte("qcow2 bytes"))},
		{Name: "debian-12.raw", Dest: "os-images", Source: "url", SHA256: cas.Digest("sha256:" + strings.Repeat("ab", 32))},
		{Name: "ironic-python-agent.kernel", Dest: "os-images", Source: "url", SHA256: cas.DigestOf([]byte("not an OS image"))},
		{Name: "kubeadm", Dest: "packages", Source: "toolchain", SHA256: cas.DigestOf([]byte("a binary"))},
	}}
	if err := bundle.WriteLock(filepath.Join(dir, "bundle.lock"), lock); err != nil {
		t.Fatal(err)
	}
	got, err := bundledImages(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Name != "debian-12" || got[0].SHA256 != strings.Repeat("ab", 32) || got[0].Format != "raw" ||
		got[1].Name != "ubuntu-22.04" || got[1].Format != "qcow2" ||
		got[1].SHA256 != "7d30589137388fa419165760d269010919c9faa168b61326d403989eea4f38e8" {
		t.Fatalf("bundledImages = %+v", got)
	}
	// No lock (a bare OCI layout): an empty, known list (names are checked).
	none, err := bundledImages(t.TempDir())
	if err != nil || none == nil || len(none) != 0 {
		t.Fatalf("bundledImages of a bundle without a lock = %v, %v", none, err)
	}
}
