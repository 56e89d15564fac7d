package ramdisk

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestExtra: the extra archive unpacks, with real cpio, into the files
// with their folders, content and modes; appended to an initramfs it
// starts on a 512-byte boundary after zeros; a path out of the root is
// refused.
func TestExtra(t *testing.T) {
	files := []File{
		{Path: "etc/ironic-python-agent.conf.d/bootstick-tls.conf", Mode: 0o644, Data: []byte("[DEFAULT]\ncafile = /etc/bootstick/ironic-ca.pem\n")},
		{Path: "etc/bootstick/ironic-ca.pem", Mode: 0o644, Data: []byte("-----BEGIN CERTIFICATE-----\nx\n")},
		{Path: "odd", Mode: 0o600, Data: []byte("12345")},
	}
	extra, err := Extra(files)
	if err != nil {
		t.Fatal(err)
	}
	base := bytes.Repeat([]byte{0x28, 0xb5, 0x2f, 0xfd}, 250) // 1000 bytes standing for a zstd archive
	var all bytes.Buffer
	n, err := WithExtra(&all, bytes.NewReader(base), extra)
	if err != nil || n != int64(all.Len()) {
		t.Fatalf("WithExtra: %d, %v (wrote %d)", n, err, all.Len())
	}
	got := all.Bytes()
	if !bytes.Equal(got[:1000], base) || !bytes.Equal(got[1000:1024], make([]byte, 24)) || !bytes.Equal(got[1024:], extra) {
		t.Fatalf("WithExtra: base, 24 zeros, the extra archive at 1024; got %d bytes", len(got))
	}

	dir := t.TempDir()
	cpio := exec.Command("cpio", "-idm", "--quiet", "--no-absolute-filenames")
	cpio.Dir, cpio.Stdin = dir, bytes.NewReader(extra)
	if out, err := cpio.CombinedOutput(); err != nil {
		t.Fatalf("cpio -i: %v\n%s", err, out)
	}
	for _, f := range files {
		p := filepath.Join(dir, f.Path)
		data, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(data, f.Data) {
			t.Errorf("%s: %q, %v; want %q", f.Path, data, err, f.Data)
			continue
		}
		if fi, _ := os.Stat(p); fi.Mode().Perm() != f.Mode {
			t.Errorf("%s: mode %v, want %v", f.Path, fi.Mode().Perm(), f.Mode)
		}
	}
	list := exec.Command("cpio", "-t", "--quiet")
	list.Stdin = bytes.NewReader(extra)
	out, err := list.Output()
	if err != nil {
		t.Fatal(err)
	}
	if want := "etc\netc/bootstick\netc/bootstick/ironic-ca.pem\netc/ironic-python-agent.conf.d\netc/ironic-python-agent.conf.d/bootstick-tls.conf\nodd\n"; string(out) != want {
		t.Errorf("cpio -t:\n%s\nwant folders before their files, once each:\n%s", out, want)
	}

	for _, bad := range []string{"/etc/passwd", "../x", "."} {
		if _, err := Extra([]File{{Path: bad}}); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("Extra(%q): %v, want refused naming it", bad, err)
		}
	}
}

// TestDerive: the derived ramdisk is written once, whole; the same base
// and extra leave it alone; another extra or a new base write it again;
// a folder it cannot write in fails naming it and leaves nothing.
func TestDerive(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "ipa.initramfs")
	if err := os.WriteFile(base, bytes.Repeat([]byte{1}, 700), 0o444); err != nil {
		t.Fatal(err)
	}
	extra, _ := Extra([]File{{Path: "etc/a", Mode: 0o644, Data: []byte("a")}})
	dst := filepath.Join(dir, "out", "ipa.initramfs")
	os.Mkdir(filepath.Dir(dst), 0o755)
	for i, c := range []struct {
		extra []byte
		touch bool
		want  bool
	}{{extra, false, true}, {extra, false, false}, {append(extra, 0), false, true}, {append(extra, 0), true, true}, {append(extra, 0), false, false}} {
		if c.touch {
			when := time.Now().Add(time.Duration(i) * time.Hour)
			os.Chtimes(base, when, when)
		}
		wrote, err := Derive(base, dst, c.extra)
		if err != nil || wrote != c.want {
			t.Fatalf("call %d: wrote %v, %v; want %v", i, wrote, err, c.want)
		}
		got, _ := os.ReadFile(dst)
		if len(got) != 1024+len(c.extra) || !bytes.Equal(got[1024:], c.extra) {
			t.Fatalf("call %d: %d bytes, want the base, padding and the extra (%d)", i, len(got), 1024+len(c.extra))
		}
	}
	bad := filepath.Join(dir, "missing", "ipa.initramfs")
	if _, err := Derive(base, bad, extra); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("Derive into a missing folder: %v, want an error naming %s", err, bad)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "out", "*.tmp")); len(left) > 0 {
		t.Errorf("left %v", left)
	}
}
