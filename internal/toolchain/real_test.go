package toolchain

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/partition/gpt"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/ocibuild"
	"github.com/bootstick/bootstick/internal/recipes"
)

// The tests below check the toolchain that `make toolchain` built into the
// cache ($BOOTSTICK_CACHE), against the pins in images/recipes.yaml.

func realToolchain(t *testing.T) (*Result, *recipes.Spec) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration: reads the toolchain `make toolchain` built (run without -short, as make test does)")
	}
	tc, err := Open(cas.DefaultRoot())
	if err != nil {
		t.Fatal(err)
	}
	spec, err := recipes.Load(filepath.Join("..", "..", "images", "recipes.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return tc, spec
}

func recipeVersion(t *testing.T, spec *recipes.Spec, name string) string {
	for _, r := range spec.Binaries {
		if r.Name == name {
			return r.Version
		}
	}
	t.Fatalf("images/recipes.yaml has no recipe %s", name)
	return ""
}

func layoutImages(t *testing.T, dir string) (v1.ImageIndex, map[string]v1.Hash) {
	t.Helper()
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]v1.Hash{}
	for _, d := range im.Manifests {
		name := d.Annotations[ocibuild.AnnotationImageName]
		if tag := d.Annotations[ocibuild.AnnotationRefName]; !strings.HasSuffix(name, ":"+tag) {
			t.Errorf("layout entry %s has tag annotation %q", name, tag)
		}
		byName[name] = d.Digest
	}
	return idx, byName
}

func TestKubeadmImagesAreInTheLayout(t *testing.T) {
	tc, spec := realToolchain(t)
	version := recipeVersion(t, spec, "kubernetes")
	if tc.Manifest.KubernetesVersion != version {
		t.Fatalf("the cached toolchain is Kubernetes %s, images/recipes.yaml pins %s: run `make toolchain`", tc.Manifest.KubernetesVersion, version)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	want, err := KubeadmImages(ctx, tc.Bin("kubeadm"), version)
	if err != nil {
		t.Fatal(err)
	}
	if len(want) < 7 {
		t.Fatalf("kubeadm config images list printed %d images: %v", len(want), want)
	}
	idx, have := layoutImages(t, tc.Layout())
	for _, ref := range want {
		d, ok := have[ref]
		if !ok {
			t.Errorf("kubeadm %s pulls %s, which is not in the layout %s", version, ref, tc.Layout())
			continue
		}
		img, err := idx.Image(d)
		if err != nil {
			t.Errorf("%s: %v", ref, err)
			continue
		}
		// Every blob of the image is in the layout and matches its digest.
		if err := validateImage(img); err != nil {
			t.Errorf("%s: %v", ref, err)
		}
	}
}

func validateImage(img v1.Image) error {
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	for _, l := range layers {
		rc, err := l.Compressed()
		if err != nil {
			return err
		}
		rc.Close()
	}
	_, err = img.ConfigFile()
	return err
}

func TestBinariesReportThePinnedVersions(t *testing.T) {
	tc, spec := realToolchain(t)
	k8s := recipeVersion(t, spec, "kubernetes")
	etcd := strings.TrimPrefix(recipeVersion(t, spec, "etcd"), "v")
	coredns := strings.TrimPrefix(recipeVersion(t, spec, "coredns"), "v")
	pause := recipeVersion(t, spec, "pause")
	for _, tt := range []struct {
		bin  string
		args []string
		want string
	}{
		{"kube-apiserver", []string{"--version"}, "Kubernetes " + k8s},
		{"kube-controller-manager", []string{"--version"}, "Kubernetes " + k8s},
		{"kube-scheduler", []string{"--version"}, "Kubernetes " + k8s},
		{"kube-proxy", []string{"--version"}, "Kubernetes " + k8s},
		{"kubelet", []string{"--version"}, "Kubernetes " + k8s},
		{"kubeadm", []string{"version", "-o", "short"}, k8s},
		{"kubectl", []string{"version", "--client"}, "Client Version: " + k8s},
		{"etcd", []string{"--version"}, "etcd Version: " + etcd},
		{"etcdctl", []string{"version"}, "etcdctl version: " + etcd},
		{"coredns", []string{"-version"}, "CoreDNS-" + coredns},
		{"pause", []string{"-v"}, "pause " + pause},
	} {
		t.Run(tt.bin, func(t *testing.T) {
			out, err := exec.Command(tc.Bin(tt.bin), tt.args...).CombinedOutput()
			if err != nil {
				t.Fatalf("%s %s: %v\n%s", tt.bin, strings.Join(tt.args, " "), err, out)
			}
			if !strings.Contains(string(out), tt.want) {
				t.Fatalf("%s %s printed %q, want it to contain %q", tt.bin, strings.Join(tt.args, " "), out, tt.want)
			}
		})
	}
}

// unpackImage unpacks the layout's image ref into a temporary folder and
// returns it.
func unpackImage(t *testing.T, tc *Result, ref string) string {
	t.Helper()
	idx, have := layoutImages(t, tc.Layout())
	img, err := idx.Image(have[ref])
	if err != nil {
		t.Fatalf("%s: %v", ref, err)
	}
	root := t.TempDir()
	if err := untar(mutate.Extract(img), root); err != nil {
		t.Fatal(err)
	}
	return root
}

// TestKubeProxyImageRunsIptables unpacks the kube-proxy image and runs its
// own iptables, with its own libraries, in a chroot.
func TestKubeProxyImageRunsIptables(t *testing.T) {
	tc, spec := realToolchain(t)
	if os.Geteuid() != 0 {
		t.Fatal("this test chroots into the image and needs root")
	}
	ref := "registry.k8s.io/kube-proxy:" + recipeVersion(t, spec, "kubernetes")
	root := unpackImage(t, tc, ref)
	for _, args := range [][]string{
		{"/usr/sbin/iptables", "--version"},
		{"/usr/sbin/ip6tables", "--version"},
		{"/usr/local/bin/kube-proxy", "--version"},
	} {
		out, err := exec.Command("chroot", append([]string{root}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("chroot %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		if strings.HasSuffix(args[0], "tables") && !strings.Contains(string(out), "(nf_tables)") {
			t.Errorf("%s --version printed %q, want the nf_tables back end", args[0], out)
		}
	}
	// iptables-save reads the kernel's tables through its libraries.
	if out, err := exec.Command("chroot", root, "/usr/sbin/iptables-save").CombinedOutput(); err != nil {
		t.Fatalf("chroot iptables-save: %v\n%s", err, out)
	}
}

// TestToolboxImageHasItsTools unpacks the toolbox image (Debian packages
// alone) and runs its shell and busybox in a chroot: the applets the
// README names are there.
func TestToolboxImageHasItsTools(t *testing.T) {
	tc, spec := realToolchain(t)
	if os.Geteuid() != 0 {
		t.Fatal("this test chroots into the image and needs root")
	}
	i := slices.IndexFunc(spec.Images, func(im recipes.Image) bool { return slices.Contains(im.Debs, "busybox-static") })
	if i < 0 {
		t.Fatal("images/recipes.yaml has no image of busybox-static")
	}
	ref := spec.Images[i].Ref
	root := unpackImage(t, tc, ref)
	out, err := exec.Command("chroot", append([]string{root}, append(spec.Images[i].Entrypoint, "sh", "-c", "busybox --list")...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("chroot %s sh -c 'busybox --list': %v\n%s", root, err, out)
	}
	applets := strings.Fields(string(out))
	for _, a := range []string{"sh", "wget", "nc", "ping", "nslookup", "httpd", "timeout"} {
		if !slices.Contains(applets, a) {
			t.Errorf("%s's busybox lacks %s", ref, a)
		}
	}
}

func TestLayoutStoresSharedBlobsOnce(t *testing.T) {
	tc, spec := realToolchain(t)
	idx, have := layoutImages(t, tc.Layout())
	// A Debian root is one layer of its own; every other image is built
	// on the shared base.
	ownRoot := map[string]bool{}
	for _, im := range spec.Images {
		if im.Debian != nil {
			ownRoot[im.Ref] = true
		}
	}
	refs := map[v1.Hash]int{}
	onBase := map[v1.Hash]int{}
	based := 0
	for name, d := range have {
		img, err := idx.Image(d)
		if err != nil {
			t.Fatal(err)
		}
		m, err := img.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		refs[d]++
		refs[m.Config.Digest]++
		for _, l := range m.Layers {
			refs[l.Digest]++
		}
		if ownRoot[name] {
			continue
		}
		based++
		for _, l := range m.Layers {
			onBase[l.Digest]++
		}
	}
	blobs, err := os.ReadDir(filepath.Join(tc.Layout(), "blobs", "sha256"))
	if err != nil {
		t.Fatal(err)
	}
	if len(blobs) != len(refs) {
		t.Fatalf("layout holds %d blobs, the images reference %d distinct ones", len(blobs), len(refs))
	}
	shared := 0
	for _, n := range onBase {
		if n == based {
			shared++
		}
	}
	if based < 2 || shared == 0 {
		t.Fatalf("no layer is shared by all %d images built on the base: the base layer should be", based)
	}
}

// TestComputeImageHoldsNoHostKeys reads /etc/ssh in the compute image's
// root file system: the sshd configuration is there and no host key is.
// Keys made at build time would be every host's, and readable by anyone
// with the stick; cloud-init writes each host's own at its first boot.
func TestComputeImageHoldsNoHostKeys(t *testing.T) {
	tc, _ := realToolchain(t)
	raw := filepath.Join(t.TempDir(), "disk.raw")
	if out, err := exec.Command("qemu-img", "convert", "-f", "qcow2", "-O", "raw", tc.File("debian-13-compute.qcow2"), raw).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img: %v\n%s", err, out)
	}
	d, err := diskfs.Open(raw, diskfs.WithOpenMode(diskfs.ReadOnly))
	if err != nil {
		t.Fatal(err)
	}
	pt, err := d.GetPartitionTable()
	d.Close()
	if err != nil {
		t.Fatal(err)
	}
	table, ok := pt.(*gpt.Table)
	if !ok || len(table.Partitions) != 3 {
		t.Fatalf("partition table %T, want GPT with 3 partitions", pt)
	}
	root := table.Partitions[2]
	out, err := exec.Command("debugfs", "-R", "ls /etc/ssh", fmt.Sprintf("%s?offset=%d", raw, root.Start*512)).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "sshd_config") {
		t.Fatalf("debugfs ls /etc/ssh: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "ssh_host_") {
		t.Errorf("the compute image holds SSH host keys:\n%s", out)
	}
}

// deployRamdiskListing is cpio's listing (mode "-t" or "-tv") of the
// real toolchain's deploy ramdisk.
func deployRamdiskListing(t *testing.T, mode string) string {
	t.Helper()
	tc, _ := realToolchain(t)
	out, err := exec.Command("sh", "-c", `zstd -dc "$1" | cpio `+mode+` --quiet`, "sh", tc.File("ironic-python-agent.initramfs")).Output()
	if err != nil {
		t.Fatalf("listing the initramfs: %v", err)
	}
	return string(out)
}

// TestDeployRamdiskHoldsNothingOfTheBuild lists the deploy ramdisk: no
// path of the build machine's cache (mmdebstrap's mount points for the
// placeholder packages) and no NVMe host identity made at install time,
// which every host would share and which made each build differ.
func TestDeployRamdiskHoldsNothingOfTheBuild(t *testing.T) {
	out := deployRamdiskListing(t, "-t")
	if !strings.Contains(out, "usr/bin/ironic-python-agent") {
		t.Fatalf("the initramfs holds no usr/bin/ironic-python-agent: is it the deploy ramdisk?")
	}
	cache := strings.TrimPrefix(cas.DefaultRoot(), "/")
	for _, p := range strings.Split(out, "\n") {
		p = strings.TrimPrefix(p, "./")
		if strings.HasPrefix(p, cache) || p == "etc/nvme/hostid" || p == "etc/nvme/hostnqn" {
			t.Errorf("the deploy ramdisk holds %s", p)
		}
	}
}

// TestDeployRamdiskNICFirmwareAndClock: the deploy ramdisk carries the
// firmware of the common server NICs that need it (bnx2, bnx2x, qed, ice:
// the files its kernel's modules name, nothing else under lib/firmware),
// and chrony, with which the agent sets its clock from the bootstrap
// machine (ipa-ntp-server) while chrony's own service stays masked.
func TestDeployRamdiskNICFirmwareAndClock(t *testing.T) {
	have := map[string]string{} // path: the line, which shows a link's target
	for _, l := range strings.Split(deployRamdiskListing(t, "-tv"), "\n") {
		if f := strings.Fields(l); len(f) >= 9 {
			have[strings.TrimPrefix(f[8], "./")] = l
		}
	}
	for _, p := range []string{"usr/sbin/chronyd", "usr/bin/chronyc", "usr/sbin/hwclock"} {
		if have[p] == "" {
			t.Errorf("the deploy ramdisk has no %s", p)
		}
	}
	if l := have["etc/systemd/system/chrony.service"]; !strings.HasSuffix(l, "-> /dev/null") {
		t.Errorf("chrony's service is not masked in the deploy ramdisk: %q", l)
	}
	families := map[string]int{}
	for p := range have {
		rest, ok := strings.CutPrefix(p, "usr/lib/firmware/")
		if !ok || !strings.Contains(rest, "/") || strings.HasPrefix(have[p], "d") {
			continue // not a file below a firmware family's folder
		}
		family := strings.SplitN(rest, "/", 2)[0]
		if family == "intel" && strings.HasPrefix(rest, "intel/ice/") {
			family = "ice"
		}
		families[family]++
		if !slices.Contains([]string{"bnx2", "bnx2x", "qed", "ice"}, family) {
			t.Errorf("the deploy ramdisk holds firmware no kept NIC module names: %s", p)
		}
	}
	for _, f := range []string{"bnx2", "bnx2x", "qed", "ice"} {
		if families[f] == 0 {
			t.Errorf("the deploy ramdisk holds no %s firmware", f)
		}
	}
	if have["usr/lib/firmware/bnx2x/bnx2x-e2-7.13.1.0.fw"] != "" {
		t.Errorf("the deploy ramdisk holds bnx2x firmware its kernel never loads")
	}
	t.Logf("NIC firmware files in the deploy ramdisk: %v", families)
}
