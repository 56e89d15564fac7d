// Package qemutest boots the real stick in QEMU and proves the appliance
// end to end: firstboot finishes with no route out, the node is Ready, every
// pod runs from images the stick's registry served, and the test site's
// objects exist. It answers "if I dd this to a stick and power on, does it
// work with no network?" on every commit.
//
// The stick is built once per test binary with `mkusb build --site` from
// the real toolchain cache, with a test site whose sshAuthorizedKeys carry a
// key the harness generates; or BOOTSTICK_ISO names a prebuilt ISO, with
// BOOTSTICK_SSH_KEY the private key its site authorizes.
//
// Scenario 1 (cold boot to done) runs in `make test`; the e2e build tag adds
// the reboot, the power cut during kubeadm init and the four boot modes
// (`make e2e`).
package qemutest

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/qemu"
)

// Stick is an ISO to boot and what the harness needs to log in to it.
type Stick struct {
	ISO string
	// Site is the site file embedded in the ISO (empty for BOOTSTICK_ISO
	// without BOOTSTICK_SITE).
	Site string
	// Signer logs in as root; the site's sshAuthorizedKeys hold its public
	// half. KeyFile is the private key (empty for a given ISO: EnvSSHKey).
	Signer  ssh.Signer
	KeyFile string
	// BuildTime is how long mkusb build took (0 for a given ISO).
	BuildTime time.Duration
}

// Environment variables that point the harness at a prebuilt stick.
const (
	EnvISO    = "BOOTSTICK_ISO"     // a prebuilt ISO
	EnvSSHKey = "BOOTSTICK_SSH_KEY" // the private key its site authorizes
	EnvSite   = "BOOTSTICK_SITE"    // its site file (for the site-object checks)
	EnvLogs   = "BOOTSTICK_E2E_LOGS"
)

// DataDiskSize is the size of the empty (sparse) data disk.
const DataDiskSize = 8 << 30

// SiteYAML is the test site: the external network on the QEMU user
// network's NIC at slirp's fixed guest address, with no gateway (slirp's
// leads nowhere, restrict=on: a site with no router, where the appliance
// comes up on its provisioning address), the provisioning network on a
// second NIC alone on a hub,
// the virtio data disk, and two hosts whose BMCs are in a documentation
// range (nothing answers: the appliance must come up anyway).
// authorizedKey is the harness's public key.
func SiteYAML(authorizedKey string) string {
	return fmt.Sprintf(`apiVersion: bootstick.dev/v1alpha1
kind: Site
bootstrap:
  provisioning:
    interface: %[5]s
    address: 172.22.0.1/24
    dhcpRange:
      start: 172.22.0.10
      end: 172.22.0.100
  external:
    interface: %[1]s
    address: %[2]s/%[3]d
  dataDisk: /dev/vda
hosts:
- name: master-0
  role: master
  bmc:
    address: ipmi://192.0.2.10:623
    credentials:
      username: admin
      password: qemu-test-master-0
  bootMACAddress: 52:54:00:00:02:00
  rootDeviceHints:
    deviceName: /dev/sda
  image:
    url: http://172.22.0.1:6180/images/test.qcow2
    checksum: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
    format: qcow2
- name: worker-0
  role: worker
  bmc:
    address: redfish+https://192.0.2.11/redfish/v1/Systems/1
    disableCertificateVerification: true
    credentials:
      username: admin
      password: qemu-test-worker-0
  bootMACAddress: 52:54:00:00:02:01
  image:
    url: http://172.22.0.1:6180/images/test.qcow2
    checksum: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
    format: qcow2
cluster:
  name: qemu-test
sshAuthorizedKeys:
- %[4]s
`, qemu.NICName, qemu.GuestAddress, qemu.GuestPrefix, authorizedKey, qemu.ProvisioningNICName)
}

// NewKey makes an ed25519 key: its signer and its authorized_keys line.
func NewKey() (ssh.Signer, []byte, string, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, "", fmt.Errorf("generating the test key: %w", err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		return nil, nil, "", fmt.Errorf("generating the test key: %w", err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "bootstick-qemu-test")
	if err != nil {
		return nil, nil, "", fmt.Errorf("encoding the test key: %w", err)
	}
	spub, err := ssh.NewPublicKey(pub)
	if err != nil {
		return nil, nil, "", fmt.Errorf("encoding the test key: %w", err)
	}
	line := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(spub))) + " bootstick-qemu-test"
	return signer, pem.EncodeToMemory(block), line, nil
}

// RepoRoot is the module's root, found from the working folder.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working folder")
		}
		dir = parent
	}
}

var (
	stickOnce sync.Once
	stick     *Stick
	stickErr  error
)

// SharedStick builds (or finds) the stick once per test binary, in dir.
// log receives mkusb's output.
func SharedStick(ctx context.Context, dir string, log io.Writer) (*Stick, error) {
	stickOnce.Do(func() { stick, stickErr = buildStick(ctx, dir, log) })
	return stick, stickErr
}

func buildStick(ctx context.Context, dir string, log io.Writer) (*Stick, error) {
	if iso := os.Getenv(EnvISO); iso != "" {
		return givenStick(iso)
	}
	return BuildStick(ctx, dir, log, func(key string) ([]byte, error) { return []byte(SiteYAML(key)), nil })
}

// BuildStick builds a stick in dir with the site that site makes for the
// harness's authorized key.
func BuildStick(ctx context.Context, dir string, log io.Writer, site func(authorizedKey string) ([]byte, error)) (*Stick, error) {
	repo, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	signer, private, line, err := NewKey()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	// For a person looking into a running test machine:
	// ssh -i DIR/id_ed25519 -p PORT root@127.0.0.1 (the port is logged).
	if err := os.WriteFile(filepath.Join(dir, "id_ed25519"), private, 0o600); err != nil {
		return nil, fmt.Errorf("writing the test key: %w", err)
	}
	siteYAML, err := site(line)
	if err != nil {
		return nil, err
	}
	sitePath := filepath.Join(dir, "site.yaml")
	if err := os.WriteFile(sitePath, siteYAML, 0o600); err != nil {
		return nil, fmt.Errorf("writing the test site: %w", err)
	}
	bin := filepath.Join(dir, "bin")
	for _, name := range []string{"mkusb", "firstboot"} {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(bin, name), "./cmd/"+name)
		cmd.Dir = repo
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go build ./cmd/%s: %w\n%s", name, err, out)
		}
	}
	// The lock goes beside the ISO: a build here never rewrites the
	// checkout's bundle/default.lock. Start from it when there is one, so
	// the build reuses what it pins.
	lock := filepath.Join(dir, "default.lock")
	if data, err := os.ReadFile(filepath.Join(repo, "bundle", "default.lock")); err == nil {
		if err := os.WriteFile(lock, data, 0o644); err != nil {
			return nil, err
		}
	}
	iso := filepath.Join(dir, "bootstick.iso")
	start := time.Now()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "mkusb"), "build",
		"--bundle", filepath.Join(repo, "bundle", "default.yaml"), "--lock", lock,
		// The test's BMCs are virtual and their passwords made for the run.
		"--cache", cas.DefaultRoot(), "--site", sitePath, "--allow-cleartext",
		"--firstboot", filepath.Join(bin, "firstboot"), "--overlay", filepath.Join(repo, "overlay"),
		"--output", iso)
	cmd.Dir = repo
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("mkusb build --site %s: %w", sitePath, err)
	}
	return &Stick{ISO: iso, Site: sitePath, Signer: signer, KeyFile: filepath.Join(dir, "id_ed25519"), BuildTime: time.Since(start)}, nil
}

func givenStick(iso string) (*Stick, error) {
	keyFile := os.Getenv(EnvSSHKey)
	if keyFile == "" {
		return nil, fmt.Errorf("%s=%s needs %s: the private key whose public half the ISO's site lists in sshAuthorizedKeys", EnvISO, iso, EnvSSHKey)
	}
	data, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", EnvSSHKey, err)
	}
	signer, err := ssh.ParsePrivateKey(data)
	if err != nil {
		return nil, fmt.Errorf("%s %s: not an unencrypted OpenSSH private key", EnvSSHKey, keyFile)
	}
	if _, err := os.Stat(iso); err != nil {
		return nil, fmt.Errorf("%s: %w", EnvISO, err)
	}
	return &Stick{ISO: iso, Site: os.Getenv(EnvSite), Signer: signer, KeyFile: keyFile}, nil
}
