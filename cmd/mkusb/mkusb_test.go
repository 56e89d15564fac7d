package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/debs"
	"github.com/bootstick/bootstick/internal/stick"
	"github.com/bootstick/bootstick/internal/testkit"
	"github.com/bootstick/bootstick/internal/toolchain"
)

// smallISO builds a stick from the stand-in toolchain and a fake OS.
func smallISO(t *testing.T) string {
	t.Helper()
	store, err := cas.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tc, err := testkit.Toolchain(store, 4096, 4096)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bf, err := testkit.Bundle(dir, testkit.Manifests, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"vmlinuz", "initrd.img", "filesystem.squashfs"} {
		os.WriteFile(filepath.Join(dir, f), []byte(f), 0o644)
	}
	out := filepath.Join(t.TempDir(), "x.iso")
	_, err = stick.Build(context.Background(), stick.Options{
		Bundle: bf, Output: out, Store: store, Epoch: time.Unix(1, 0), Overlay: "../../overlay",
		Toolchain: func(context.Context, string) (*toolchain.Result, error) { return tc, nil },
		OS: func(context.Context, stick.OSRequest) (stick.OSResult, error) {
			return stick.OSResult{Kernel: filepath.Join(dir, "vmlinuz"), Initrd: filepath.Join(dir, "initrd.img"), Squashfs: filepath.Join(dir, "filesystem.squashfs")}, nil
		},
		Debs: func(ctx context.Context, names []string) ([]debs.Package, error) {
			var out []debs.Package
			for _, n := range names {
				out = append(out, debs.Package{Name: n, Version: "1", Arch: "amd64", SHA256: cas.Digest("sha256:" + strings.Repeat("a", 64))})
			}
			return out, nil
		},
		Mirror:        func(string) (string, error) { return "http://deb.test/debian", nil },
		KubeadmImages: func(context.Context, []byte) ([]string, error) { return testkit.Images, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// run runs mkusb and returns its exit code, stdout and stderr.
func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	r, w, _ := os.Pipe()
	old := os.Stdout
	os.Stdout = w
	var errb bytes.Buffer
	code := app.Run(context.Background(), args, &errb)
	w.Close()
	os.Stdout = old
	out, _ := io.ReadAll(r)
	return code, string(out), errb.String()
}

func TestInspectVerifyWrite(t *testing.T) {
	iso := smallISO(t)
	code, out, errs := run(t, "inspect", iso, "--json")
	if code != 0 {
		t.Fatalf("inspect: %d %s", code, errs)
	}
	var rep stick.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("inspect --json: %v\n%s", err, out)
	}
	if rep.Lock == nil || len(rep.Lock.Images) != len(testkit.Images) || len(rep.Boot) != 2 {
		t.Errorf("report %+v", rep)
	}
	code, out, errs = run(t, "inspect", iso)
	for _, want := range []string{"El Torito BIOS", "El Torito UEFI", testkit.Registry + "/pause:3.10.1", "/bundle/packages/kubeadm", "/live/layer.squashfs"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("inspect (%d) lacks %q:\n%s%s", code, want, out, errs)
		}
	}
	if code, out, errs = run(t, "verify", iso); code != 0 || !strings.Contains(out, "ok:") {
		t.Errorf("verify: %d %s %s", code, out, errs)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"inspect"}, 2, "name the ISO"},
		{[]string{"inspect", filepath.Join(t.TempDir(), "none.iso")}, 1, "no such file"},
		{[]string{"verify", "/etc/hostname"}, 1, "not"},
		{[]string{"write", iso}, 2, "--device is required"},
		{[]string{"write", iso, "--device", "/etc/hostname"}, 1, "not a block device"},
		{[]string{"build", "--bundle", filepath.Join(t.TempDir(), "none.yaml"), "--output", filepath.Join(t.TempDir(), "o.iso")}, 1, "reading bundle"},
	} {
		code, _, errs := run(t, tc.args...)
		if code != tc.code || !strings.Contains(errs, tc.want) {
			t.Errorf("mkusb %v: exit %d, stderr %q; want %d and %q", tc.args, code, errs, tc.code, tc.want)
		}
	}
}
