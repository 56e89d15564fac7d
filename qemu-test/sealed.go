package qemutest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// secretFiles are the secrets the appliance keeps on its data disk, each
// with how the test picks a needle out of it: a piece of the secret long
// enough to be found nowhere else. Optional ones are made by steps that
// make test's cold boot does not reach (the site step).
var secretFiles = []secretFile{
	{"the cluster CA's private key", "/etc/kubernetes/pki/ca.key", pemBody, false},
	{"etcd's CA private key", "/etc/kubernetes/pki/etcd/ca.key", pemBody, false},
	{"the service-account signing key", "/etc/kubernetes/pki/sa.key", pemBody, false},
	{"super-admin.conf's client key", "/etc/kubernetes/super-admin.conf", valueOf("client-key-data:"), false},
	{"etcd's encryption key", "/var/lib/bootstick/encryption/config.yaml", valueOf("secret:"), false},
	{"sshd's host private key", "/var/lib/bootstick/ssh-host-keys/ssh_host_ed25519_key", pemBody, false},
	{"the BPA's SSH private key", "/var/lib/bootstick/ssh/id_ed25519", pemBody, true},
	{"the age identity", "/var/lib/bootstick/age/identity.txt", valueOf(""), true},
}

type secretFile struct {
	what, path string
	needle     func(string) string
	optional   bool
}

// minNeedle is the shortest needle taken: 32 base64 characters are 192
// bits, found by chance in no disk.
const minNeedle = 32

// pemBody is the longest line of a PEM block's body.
func pemBody(s string) string {
	var best string
	for _, l := range strings.Split(s, "\n") {
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, "-----") && len(l) > len(best) {
			best = l
		}
	}
	return best
}

// valueOf is the first value after prefix on a line (prefix "" takes a
// whole line that is not a comment), cut to 64 bytes.
func valueOf(prefix string) func(string) string {
	return func(s string) string {
		for _, l := range strings.Split(s, "\n") {
			l = strings.TrimSpace(l)
			if strings.HasPrefix(l, "#") || !strings.HasPrefix(l, prefix) {
				continue
			}
			v := strings.TrimSpace(strings.TrimPrefix(l, prefix))
			if len(v) > 64 {
				v = v[:64]
			}
			if v != "" {
				return v
			}
		}
		return ""
	}
}

// secret is one needle, named by what it is (never by its value).
type secret struct {
	what, path string
	needle     []byte
}

// ReadSecrets reads files' secrets in the guest.
func (m *Machine) ReadSecrets(ctx context.Context, files []secretFile) ([]secret, []error) {
	var out []secret
	var errs []error
	for _, f := range files {
		data, err := m.Run(ctx, "cat "+f.path+" 2>/dev/null || echo MISSING")
		if err != nil {
			errs = append(errs, fmt.Errorf("reading %s (%s) in the guest: %w", f.what, f.path, err))
			continue
		}
		if strings.TrimSpace(data) == "MISSING" {
			if !f.optional {
				errs = append(errs, fmt.Errorf("%s (%s) is not on the data disk", f.what, f.path))
			}
			continue
		}
		n := f.needle(data)
		if len(n) < minNeedle {
			errs = append(errs, fmt.Errorf("%s (%s): no piece of it of %d bytes or more to look for", f.what, f.path, minNeedle))
			continue
		}
		out = append(out, secret{f.what, f.path, []byte(n)})
	}
	return out, errs
}

// CheckSealed checks, in the guest, that the data disk is the LUKS2
// volume firstboot made, unlocked, and status says its only key is sealed
// to this machine's TPM (PCR 7).
func (m *Machine) CheckSealed(ctx context.Context) []error {
	var errs []error
	src, err := m.Run(ctx, "findmnt -no SOURCE /var/lib/bootstick")
	if err != nil {
		return []error{fmt.Errorf("the data disk's mount: %w", err)}
	}
	if s := strings.TrimSpace(src); s != "/dev/mapper/bootstick-data" {
		errs = append(errs, fmt.Errorf("the data folder is on %q, not the unlocked LUKS2 volume /dev/mapper/bootstick-data", s))
	}
	rep, err := m.Status(ctx)
	switch {
	case err != nil:
		errs = append(errs, fmt.Errorf("firstboot status: %w", err))
	case !strings.HasPrefix(rep.DataDisk, "LUKS2 on /dev/") || !strings.Contains(rep.DataDisk, "its only key sealed to this machine's TPM 2.0 (PCR 7)"):
		errs = append(errs, fmt.Errorf("firstboot status shows the data disk as %q, want LUKS2 with its only key sealed to the TPM (PCR 7)", rep.DataDisk))
	}
	return errs
}

// luksMagic starts a LUKS header.
var luksMagic = []byte("LUKS\xba\xbe")

// SearchDisk reads a data disk's image as a thief with the disk would
// (its data extents; holes read as zeros) and returns the secrets found
// in it. It fails unless the image starts with a LUKS header.
func SearchDisk(path string, secrets []secret) (found []secret, scanned int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	head := make([]byte, len(luksMagic))
	if _, err := io.ReadFull(f, head); err != nil || !bytes.Equal(head, luksMagic) {
		return nil, 0, fmt.Errorf("%s does not start with a LUKS header (%q, %v)", path, head, err)
	}
	overlap := 0
	for _, s := range secrets {
		overlap = max(overlap, len(s.needle))
	}
	seen := make([]bool, len(secrets))
	buf := make([]byte, 8<<20)
	fd := int(f.Fd())
	for off := int64(0); ; {
		start, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if err != nil {
			break // ENXIO: no data after off
		}
		end, err := unix.Seek(fd, start, unix.SEEK_HOLE)
		if err != nil {
			return nil, scanned, fmt.Errorf("%s: %w", path, err)
		}
		for pos := start; pos < end; {
			n, err := f.ReadAt(buf[:min(int64(len(buf)), end-pos)], pos)
			if n == 0 && err != nil {
				return nil, scanned, fmt.Errorf("%s: %w", path, err)
			}
			for i, s := range secrets {
				if !seen[i] && bytes.Contains(buf[:n], s.needle) {
					seen[i] = true
				}
			}
			scanned += int64(n)
			// Step back by a needle's length, so one split across two
			// reads is seen whole in the second.
			next := pos + int64(n)
			if next < end {
				next -= int64(overlap)
			}
			pos = next
		}
		off = end
	}
	for i, s := range secrets {
		if seen[i] {
			found = append(found, s)
		}
	}
	return found, scanned, nil
}
