package ocibuild

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/bootstick/bootstick/internal/cas"
)

func TestLayerIsReproducible(t *testing.T) {
	src := filepath.Join(t.TempDir(), "bin")
	os.WriteFile(src, []byte("#!/bin/sh\n"), 0o755)
	entries := []Entry{
		HostFile("/usr/local/bin/tool", 0o755, src),
		File("/etc/passwd", 0o644, []byte("root:x:0:0::/:/bin/sh\n")),
		Symlink("/usr/bin/tool", "../local/bin/tool"),
	}
	epoch := time.Unix(1700000000, 0)
	s1, _ := cas.Open(t.TempDir())
	s2, _ := cas.Open(t.TempDir())
	a, err := WriteLayer(s1, entries, epoch)
	if err != nil {
		t.Fatal(err)
	}
	// Order of entries and the file's own mtime do not matter.
	os.Chtimes(src, time.Now(), time.Now())
	b, err := WriteLayer(s2, []Entry{entries[2], entries[0], entries[1]}, epoch)
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Fatalf("same entries gave different layers: %+v vs %+v", a, b)
	}
	c, _ := WriteLayer(s2, entries, epoch.Add(time.Second))
	if c.Digest == a.Digest {
		t.Fatal("a different epoch gave the same layer")
	}
}

func TestCheckSharedLibs(t *testing.T) {
	// A dynamically linked host binary in an empty tree misses its loader
	// and libc; with them copied in, it passes.
	sh, err := exec.LookPath("ls")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "bin"), 0o755)
	data, _ := os.ReadFile(sh)
	os.WriteFile(filepath.Join(root, "bin", "ls"), data, 0o755)
	err = CheckSharedLibs(root)
	var ml *MissingLibsError
	if !errors.As(err, &ml) || len(ml.Missing["/bin/ls"]) == 0 {
		t.Fatalf("CheckSharedLibs = %v, want /bin/ls to miss libraries", err)
	}
	// Copy in what is missing until nothing is: libraries need libraries.
	for round := 0; err != nil; round++ {
		if !errors.As(err, &ml) || round > 5 {
			t.Fatalf("CheckSharedLibs after %d rounds: %v", round, err)
		}
		for _, libs := range ml.Missing {
			for _, lib := range libs {
				copyHostLib(t, root, lib)
			}
		}
		err = CheckSharedLibs(root)
	}
	// Libraries found through a symlinked folder count too (as with
	// Debian's merged /usr): move them and leave a relative link.
	libdir := filepath.Join(root, "usr/lib/x86_64-linux-gnu")
	if err := os.Rename(libdir, filepath.Join(root, "real-libs")); err != nil {
		t.Fatal(err)
	}
	if err := CheckSharedLibs(root); err == nil {
		t.Fatal("CheckSharedLibs passed with the libraries moved away")
	}
	os.Symlink("../../real-libs", libdir)
	if err := CheckSharedLibs(root); err != nil {
		t.Fatalf("with the libraries in place: %v", err)
	}
}

// copyHostLib copies a library the host has into the tree, under
// /usr/lib/x86_64-linux-gnu (or at its absolute path, for the loader).
func copyHostLib(t *testing.T, root, lib string) {
	t.Helper()
	host, dst := filepath.Join("/lib/x86_64-linux-gnu", lib), filepath.Join(root, "usr/lib/x86_64-linux-gnu", lib)
	if filepath.IsAbs(lib) {
		host, dst = lib, filepath.Join(root, lib)
	}
	b, err := os.ReadFile(host)
	if err != nil {
		t.Fatalf("reading %s from the host: %v", host, err)
	}
	os.MkdirAll(filepath.Dir(dst), 0o755)
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestCheckSharedLibsRunpath uses glibc's gconv modules, which find their
// helper libraries through RUNPATH $ORIGIN.
func TestCheckSharedLibsRunpath(t *testing.T) {
	const gconv = "/usr/lib/x86_64-linux-gnu/gconv"
	root := t.TempDir()
	dst := filepath.Join(root, gconv)
	os.MkdirAll(dst, 0o755)
	copyFile := func(name string) {
		b, err := os.ReadFile(filepath.Join(gconv, name))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dst, name), b, 0o644)
	}
	copyFile("EUC-CN.so")
	for _, lib := range []string{"/lib64/ld-linux-x86-64.so.2", "libc.so.6"} {
		copyHostLib(t, root, lib)
	}
	var ml *MissingLibsError
	if err := CheckSharedLibs(root); !errors.As(err, &ml) || ml.Missing[gconv+"/EUC-CN.so"][0] != "libGB.so" {
		t.Fatalf("without libGB.so beside it: %v", err)
	}
	copyFile("libGB.so")
	if err := CheckSharedLibs(root); err != nil {
		t.Fatalf("with libGB.so beside it ($ORIGIN): %v", err)
	}
}
