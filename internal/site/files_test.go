package site

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A credentials file that names a device, a named pipe, a folder or a huge
// file is refused without being read (a device or a pipe would be read, or
// waited on, forever), with the host's field path and what to do.
func TestCredentialsFileMustBeASmallRegularFile(t *testing.T) {
	dir := t.TempDir()
	huge := filepath.Join(dir, "huge.yaml")
	f, err := os.Create(huge)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(4 << 30); err != nil { // sparse: costs no disk
		t.Fatal(err)
	}
	f.Close()
	fifo := filepath.Join(dir, "pipe")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	cases := map[string]string{
		"/dev/zero": "not a regular file (a device)",
		fifo:        "not a regular file (a named pipe)",
		dir:         "not a regular file (a folder)",
		huge:        "too large",
	}
	for file, want := range cases {
		site := strings.Replace(goodSiteWithCredentialsFile(t), "CREDS", file, 1)
		p := filepath.Join(dir, "site.yaml")
		if err := os.WriteFile(p, []byte(site), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Load(p, Options{BundledImages: testImages})
		if err == nil || !strings.Contains(err.Error(), "hosts[0].bmc.credentials.file") || !strings.Contains(err.Error(), want) {
			t.Errorf("credentials file %s: error %v, want the field path and %q", file, err, want)
		}
	}
}

// The site file itself: a device is refused, not read.
func TestSiteFileMustBeARegularFile(t *testing.T) {
	_, err := Load("/dev/zero", Options{})
	if err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("Load(/dev/zero) = %v", err)
	}
}

func goodSiteWithCredentialsFile(t *testing.T) string {
	t.Helper()
	return `apiVersion: bootstick.dev/v1alpha1
kind: Site
bootstrap:
  provisioning: {interface: eno2, address: 172.22.0.1/24, dhcpRange: {start: 172.22.0.10, end: 172.22.0.100}}
  dataDisk: /dev/sdb
hosts:
- name: master-0
  role: master
  bmc:
    address: ipmi://10.10.1.10:623
    credentials: {file: CREDS}
  bootMACAddress: 52:54:00:00:01:00
  image: {bundled: ubuntu-22.04}
cluster: {name: site-a}
`
}
