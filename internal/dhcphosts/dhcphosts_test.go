package dhcphosts

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

const (
	pxe    = "52:54:00:00:01:00"
	vmedia = "52:54:00:00:01:0a"
	added  = "52:54:00:00:01:01"
)

// files is the folder as dnsmasq reads it: file name -> content.
func files(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = string(b)
	}
	return out
}

func equal(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestWriteDay2: the folder holds one line per MAC, readable by dnsmasq
// after it dropped root; writing the same hosts again touches no file (a
// touched file is one more record for dnsmasq); a host added gets its
// file; a host removed keeps its file, which refuses it from then on.
func TestWriteDay2(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "hosts")
	first := []Host{{MAC: pxe, Answer: true}, {MAC: vmedia}}
	changed, err := Write(dir, first, false)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"52-54-00-00-01-00": pxe + "\n", "52-54-00-00-01-0a": vmedia + ",ignore\n"}
	if got := files(t, dir); !equal(got, want) {
		t.Errorf("folder %v, want %v", got, want)
	}
	if len(changed) != 2 {
		t.Errorf("changed %v, want both hosts", changed)
	}
	for name := range want {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.Mode().Perm() != 0o644 {
			t.Errorf("%s: mode %v (%v), want 0644: dnsmasq reads it as nobody", name, fi.Mode().Perm(), err)
		}
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("folder mode %v (%v), want 0755", fi.Mode().Perm(), err)
	}

	old := time.Now().Add(-time.Hour)
	for name := range want {
		if err := os.Chtimes(filepath.Join(dir, name), old, old); err != nil {
			t.Fatal(err)
		}
	}
	if changed, err := Write(dir, first, false); err != nil || len(changed) != 0 {
		t.Errorf("the same hosts again changed %v (%v), want nothing", changed, err)
	}
	for name := range want {
		if fi, _ := os.Stat(filepath.Join(dir, name)); !fi.ModTime().Equal(old) {
			t.Errorf("%s was written again", name)
		}
	}

	// Day 2: added comes, pxe goes.
	changed, err = Write(dir, []Host{{MAC: vmedia}, {MAC: added, Answer: true}}, false)
	if err != nil {
		t.Fatal(err)
	}
	want = map[string]string{"52-54-00-00-01-00": pxe + ",ignore\n", "52-54-00-00-01-01": added + "\n", "52-54-00-00-01-0a": vmedia + ",ignore\n"}
	if got := files(t, dir); !equal(got, want) {
		t.Errorf("after day 2: folder %v, want %v", got, want)
	}
	if !slices.Equal(changed, []Host{{MAC: pxe}, {MAC: added, Answer: true}}) {
		t.Errorf("day 2 changed %v, want pxe refused and added answered", changed)
	}
	got, err := Read(dir)
	if err != nil || !slices.Equal(got, []Host{{MAC: pxe}, {MAC: added, Answer: true}, {MAC: vmedia}}) {
		t.Errorf("Read = %v, %v", got, err)
	}
}

// TestWriteAny: with DHCP answering any MAC, a host that goes is
// answered like any machine, and a MAC refused before (a virtual-media
// host) that comes back booting by PXE is answered again.
func TestWriteAny(t *testing.T) {
	dir := t.TempDir()
	if _, err := Write(dir, []Host{{MAC: pxe, Answer: true}, {MAC: vmedia}}, true); err != nil {
		t.Fatal(err)
	}
	if _, err := Write(dir, []Host{{MAC: added, Answer: true}}, true); err != nil {
		t.Fatal(err)
	}
	got, err := Read(dir)
	want := []Host{{MAC: pxe, Answer: true}, {MAC: added, Answer: true}, {MAC: vmedia, Answer: true}}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("Read = %v (%v), want %v", got, err, want)
	}
}

// TestReadOthers: a missing folder is no hosts; files Write never makes
// (dotfiles, which dnsmasq skips; other names) are left out; a file of
// a MAC with another line is an error naming it.
func TestReadOthers(t *testing.T) {
	if got, err := Read(filepath.Join(t.TempDir(), "none")); err != nil || got != nil {
		t.Errorf("Read of a missing folder = %v, %v", got, err)
	}
	dir := t.TempDir()
	for name, text := range map[string]string{".52-54-00-00-01-00.tmp-1": "x", "README": "y", "52:54:00:00:01:00": "z"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := Read(dir); err != nil || len(got) != 0 {
		t.Errorf("Read = %v, %v; want nothing", got, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "52-54-00-00-01-00"), []byte("52:54:00:00:01:00,set:x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(dir); err == nil || !strings.Contains(err.Error(), "52-54-00-00-01-00") {
		t.Errorf("a foreign line: %v", err)
	}
}
