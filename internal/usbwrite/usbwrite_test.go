package usbwrite

import (
	"bytes"
	"context"
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/bootstick/bootstick/internal/command"
)

// loop attaches a file of size bytes to a loop device (root only).
func loop(t *testing.T, size int64) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "disk")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(f, size); err != nil {
		t.Fatal(err)
	}
	out, err := command.Output(context.Background(), command.Options{}, "losetup", "--find", "--show", f)
	if err != nil {
		t.Fatalf("losetup (needs root): %v", err)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() { exec.Command("losetup", "--detach", dev).Run() })
	return dev
}

func image(t *testing.T, size int) string {
	t.Helper()
	data := make([]byte, size)
	rand.Read(data)
	p := filepath.Join(t.TempDir(), "x.iso")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestWriteLoopDevice(t *testing.T) {
	if testing.Short() {
		t.Skip("uses loop devices: needs root")
	}
	img := image(t, 3<<20+12345)
	dev := loop(t, 8<<20)
	d, err := Describe(dev)
	if err != nil {
		t.Fatal(err)
	}
	if d.Size != 8<<20 || d.Removable || len(d.Mounts) != 0 {
		t.Fatalf("device %+v", d)
	}
	// A loop device is not removable: refused without --force.
	err = Write(context.Background(), Options{Image: img, Device: dev})
	if err == nil || !strings.Contains(err.Error(), "not a removable device") || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("got %v", err)
	}
	if err := Write(context.Background(), Options{Image: img, Device: dev, Force: true}); err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile(img)
	got := make([]byte, len(want))
	f, _ := os.Open(dev)
	defer f.Close()
	if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the device does not hold the image: %v", err)
	}
}

func TestRefusals(t *testing.T) {
	if testing.Short() {
		t.Skip("uses loop devices and mounts: needs root")
	}
	img := image(t, 2<<20)
	small := loop(t, 1<<20)
	err := Write(context.Background(), Options{Image: img, Device: small, Force: true})
	if err == nil || !strings.Contains(err.Error(), "smaller than") {
		t.Errorf("too small: %v", err)
	}

	busy := loop(t, 8<<20)
	if out, err := exec.Command("mkfs.ext2", "-q", busy).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext2: %v %s", err, out)
	}
	mnt := t.TempDir()
	if err := syscall.Mount(busy, mnt, "ext2", 0, ""); err != nil {
		t.Fatal(err)
	}
	defer syscall.Unmount(mnt, 0)
	err = Write(context.Background(), Options{Image: img, Device: busy})
	if err == nil || !strings.Contains(err.Error(), "mounted at "+mnt) {
		t.Errorf("mounted: %v", err)
	}

	f := filepath.Join(t.TempDir(), "plain")
	os.WriteFile(f, make([]byte, 4<<20), 0o644)
	if err := Write(context.Background(), Options{Image: img, Device: f, Force: true}); err == nil || !strings.Contains(err.Error(), "not a block device") {
		t.Errorf("plain file: %v", err)
	}
}
