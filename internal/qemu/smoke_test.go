package qemu

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bootstick/bootstick/internal/command"
	"github.com/bootstick/bootstick/internal/iso"
	"github.com/bootstick/bootstick/internal/rootfs"
	"github.com/bootstick/bootstick/internal/testctx"
)

func TestStartRejectsBadOptions(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "x.iso")
	if err := os.WriteFile(img, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		o    Options
		want string
	}{
		{"no image", Options{Dir: dir}, "and Dir are required"},
		{"missing image", Options{Image: filepath.Join(dir, "nope.iso"), Dir: dir}, "nope.iso"},
		{"bad firmware", Options{Image: img, Dir: dir, Firmware: "coreboot"}, "unknown firmware"},
		{"bad media", Options{Image: img, Dir: dir, Media: "floppy"}, "unknown media"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if testing.Short() && tc.want != "and Dir are required" && !strings.Contains(tc.name, "missing") {
				t.Skip("probes KVM with a real QEMU: integration tier")
			}
			vm, err := Start(context.Background(), tc.o)
			if err == nil {
				vm.Kill()
				t.Fatal("Start succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q lacks %q", err, tc.want)
			}
		})
	}
}

// TestSmokeBoot builds a small ISO from the cached Debian live OS and the
// appliance layer (overlay/ plus the firstboot binary), boots it as a CD and
// as a USB disk under BIOS and UEFI, and waits for firstboot.service to start
// on the serial console.
func TestSmokeBoot(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the OS (minutes when cold) and boots QEMU four times: integration tier")
	}
	// Under TCG a mode reaches firstboot in 1.5 to 2 minutes on a quiet
	// machine; the budgets leave room for a loaded one (another guest).
	ctx, cancel := testctx.New(t, 40*time.Minute)
	defer cancel()
	epoch := time.Unix(1700000000, 0)

	os1, err := rootfs.Build(ctx, rootfs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	fb := filepath.Join(work, "firstboot")
	build := exec.CommandContext(ctx, "go", "build", "-o", fb, "./cmd/firstboot")
	build.Dir = repo
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/firstboot: %v\n%s", err, out)
	}
	layer := filepath.Join(work, "layer")
	if err := rootfs.StageLayer(layer, filepath.Join(repo, "overlay"), map[string]string{"/usr/local/bin/firstboot": fb}); err != nil {
		t.Fatal(err)
	}
	tree := filepath.Join(work, "tree")
	if err := os.MkdirAll(filepath.Join(tree, "live"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := rootfs.Squash(ctx, layer, filepath.Join(tree, "live", rootfs.LayerImage), rootfs.SquashOptions{AllRoot: true, Epoch: epoch}); err != nil {
		t.Fatal(err)
	}
	for src, dst := range map[string]string{os1.Kernel: iso.Kernel, os1.Initrd: iso.Initrd, os1.Squashfs: "live/" + rootfs.BaseImage} {
		if err := os.Link(src, filepath.Join(tree, dst)); err != nil {
			t.Fatal(err)
		}
	}
	boot, err := iso.StageBoot(ctx, iso.BootOptions{Tree: tree, Label: "BOOTSTICK", Epoch: epoch})
	if err != nil {
		t.Fatal(err)
	}
	image := filepath.Join(work, "bootstick.iso")
	if err := iso.Write(ctx, iso.Options{Tree: tree, Output: image, Label: "BOOTSTICK", Epoch: epoch, Boot: &boot}); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(image)
	t.Logf("ISO: %d MiB", fi.Size()>>20)

	// A guest kernel that panics ends the wait at once, in words.
	started := regexp.MustCompile(`bootstick: firstboot\.service starting|Kernel panic - not syncing: .*`)
	total := time.Now()
	// Two boots at a time (go test's -parallel is GOMAXPROCS, this
	// machine's two cores): each guest has one vCPU, which TCG runs on one
	// host thread, so two side by side take the time of one.
	t.Run("modes", func(t *testing.T) {
		for _, mode := range []struct {
			fw    Firmware
			media Media
		}{{BIOS, CD}, {UEFI, CD}, {BIOS, USB}, {UEFI, USB}} {
			name := string(mode.fw) + "-" + string(mode.media)
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				bootMode(t, ctx, work, image, mode.fw, mode.media, name, started)
			})
		}
	})
	t.Logf("four boots: %.1fs", time.Since(total).Seconds())
}

// bootMode powers on the ISO in one firmware and media and waits for
// firstboot.service to start.
func bootMode(t *testing.T, ctx context.Context, work, image string, fw Firmware, media Media, name string, started *regexp.Regexp) {
	dir := filepath.Join(work, name)
	start := time.Now()
	// One vCPU: this test is about the boot path of each mode. With two
	// under multi-threaded TCG, Debian's 6.12 kernel once died at SMP
	// bring-up ("Oops: int3" in sched_clock_cpu while it patched its own
	// text), a race of the emulator, not of the stick.
	vm, err := Start(ctx, Options{Image: image, Media: media, Firmware: fw, Dir: dir, DataDisk: 1 << 30, CPUs: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Kill()
	wctx, wcancel := context.WithTimeout(ctx, 8*time.Minute)
	defer wcancel()
	match, err := vm.WaitSerial(wctx, started)
	if err == nil && strings.HasPrefix(match, "Kernel panic") {
		data, _ := os.ReadFile(vm.SerialLog)
		err = fmt.Errorf("the guest kernel panicked: %s\nlast output:\n%s", match, command.Tail(string(data), 40))
	}
	if err != nil {
		if keep := os.Getenv("BOOTSTICK_KEEP_SERIAL"); keep != "" {
			data, _ := os.ReadFile(vm.SerialLog)
			_ = os.WriteFile(filepath.Join(keep, name+".log"), data, 0o644)
		}
		t.Fatalf("%s (accel %s %s): %v", name, vm.Accel.Name, vm.Accel.Why, err)
	}
	t.Logf("%s: firstboot.service started %.1fs after power-on (accel %s)", name, time.Since(start).Seconds(), vm.Accel.Name)
}

// TestDetectRefusesPVM: a /dev/kvm from PVM is never used, though
// SeaBIOS runs on it: a Linux kernel's decompressor stops there.
func TestDetectRefusesPVM(t *testing.T) {
	old := pvmModule
	t.Cleanup(func() { pvmModule = old })
	pvmModule = t.TempDir()
	a := probe("qemu-system-x86_64")
	if a.Name != "tcg" || !strings.Contains(a.Why, "PVM") {
		t.Errorf("with PVM loaded the probe chose %s (%s), want tcg for PVM", a.Name, a.Why)
	}
}
