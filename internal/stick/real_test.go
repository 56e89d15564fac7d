package stick

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/rootfs"
	"github.com/bootstick/bootstick/internal/toolchain"
)

// TestRealBuild builds the default bundle for real: the toolchain from the
// cache (make toolchain), Debian's .debs, the OS with mmdebstrap (cached
// after the first run), the real kubeadm for the completeness check. It
// then opens the ISO with go-diskfs and checks the live files, the lock and
// the registry index.
func TestRealBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the real stick: needs the toolchain (make toolchain), root, apt and mmdebstrap")
	}
	cache := cas.DefaultRoot()
	tc, err := toolchain.Open(cache)
	if err != nil {
		t.Fatal(err)
	}
	store, err := cas.Open(cache)
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	firstboot := filepath.Join(tmp, "firstboot")
	if out, err := exec.Command("go", "build", "-o", firstboot, "../../cmd/firstboot").CombinedOutput(); err != nil {
		t.Fatalf("building firstboot: %v\n%s", err, out)
	}
	out := filepath.Join(tmp, "bootstick.iso")
	// The live OS as the stick builds it (rootfs.Build), kept to check
	// the cache entry below.
	var osOpts rootfs.Options
	var osRes rootfs.Result
	res, err := Build(context.Background(), Options{
		Bundle: "../../bundle/default.yaml", Lock: filepath.Join(tmp, "default.lock"), Output: out,
		Store: store, Epoch: time.Unix(0, 0).UTC(), Firstboot: firstboot, Overlay: "../../overlay",
		Toolchain: func(context.Context, string) (*toolchain.Result, error) { return tc, nil },
		OS: func(ctx context.Context, req OSRequest) (OSResult, error) {
			osOpts = req.rootfsOptions()
			r, err := rootfs.Build(ctx, osOpts)
			osRes = r
			return OSResult{Kernel: r.Kernel, Initrd: r.Initrd, Squashfs: r.Squashfs}, err
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	checkOSEntry(t, osOpts, osRes)
	t.Logf("steps %v, payload %+v, ISO %d MB", res.Steps, res.Payload, res.Size>>20)

	rep, err := Inspect(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"live/vmlinuz", "live/initrd.img", "live/filesystem.squashfs", "live/layer.squashfs"} {
		if rep.Build.Live[f] == "" {
			t.Errorf("no %s in build.json", f)
		}
	}
	if rep.Sizes["live"] < 100<<20 {
		t.Errorf("live is only %d bytes", rep.Sizes["live"])
	}
	if len(rep.Boot) != 2 || len(rep.Partitions) == 0 {
		t.Errorf("boot %+v partitions %+v", rep.Boot, rep.Partitions)
	}
	kubeadmImages, err := toolchain.KubeadmImages(context.Background(), tc.Bin("kubeadm"), tc.Manifest.KubernetesVersion)
	if err != nil {
		t.Fatal(err)
	}
	index := string(mustRead(t, out, "bundle/registry/index.json"))
	for _, im := range kubeadmImages {
		if !strings.Contains(index, `"`+im+`"`) {
			t.Errorf("the registry index lacks %s", im)
		}
	}
	debs := 0
	for _, d := range rep.Lock.Packages.Debs {
		if strings.HasPrefix(d.Name, "containerd") || d.Name == "runc" {
			debs++
		}
	}
	if debs < 2 || len(rep.Lock.OS.Packages) < 14 {
		t.Errorf("lock debs %v os %v", rep.Lock.Packages.Debs, rep.Lock.OS.Packages)
	}
	vr, err := Verify(context.Background(), out, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(vr.Problems) > 0 {
		t.Errorf("verify: %v", vr.Problems)
	}
	os.Remove(out)
}

// checkOSEntry checks the live OS's cache entry (package rootfs) the real
// build made or found: its kernel, initrd and squashfs, containerd and
// live-boot in the squashfs, the .debs kept for the next build, and the
// same options finding the entry again. (The real OS is built here, once,
// where make test needs it anyway, not in package rootfs with options of
// its own: a second Debian OS built cold cost CI minutes.)
func checkOSEntry(t *testing.T, opts rootfs.Options, res rootfs.Result) {
	t.Helper()
	t.Logf("rootfs entry %s (cached %v)", res.Dir, res.Cached)
	for _, f := range []string{res.Kernel, res.Initrd, res.Squashfs} {
		fi, err := os.Stat(f)
		if err != nil || fi.Size() < 1<<20 {
			t.Errorf("%s: %v (size %v)", f, err, fi)
		}
	}
	lst, err := exec.Command("unsquashfs", "-l", res.Squashfs, "usr/lib/live/boot", "usr/bin/containerd").CombinedOutput()
	if err != nil || !strings.Contains(string(lst), "usr/bin/containerd") || !strings.Contains(string(lst), "usr/lib/live/boot") {
		t.Errorf("base squashfs lacks containerd or live-boot: %v\n%s", err, lst)
	}
	debs, _ := filepath.Glob(filepath.Join(filepath.Dir(res.Dir), "debs", "*.deb"))
	if len(debs) < 100 {
		t.Errorf("the .deb cache holds %d files; want the whole OS", len(debs))
	}
	again, err := rootfs.Build(context.Background(), opts)
	if err != nil || !again.Cached || again.Dir != res.Dir {
		t.Errorf("second Build = %+v, %v; want the cached entry", again, err)
	}
}
