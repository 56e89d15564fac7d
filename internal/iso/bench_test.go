package iso

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/bootstick/bootstick/internal/benchtable"
)

// BenchmarkISOWrite writes the same staged tree (a 128 MiB squashfs
// stand-in plus 2000 small files, like an OCI layout) with Write and with
// `xorriso -as mkisofs`, and reports the time ratio ours/xorriso.
func BenchmarkISOWrite(b *testing.B) {
	if _, err := exec.LookPath("xorriso"); err != nil {
		b.Fatalf("xorriso is needed (apt-get install xorriso): %v", err)
	}
	dir := b.TempDir()
	tree, boot := stageTree(b, dir, time.Now())
	big := make([]byte, 128<<20)
	_, _ = rand.Read(big)
	if err := os.WriteFile(filepath.Join(tree, "live/filesystem.squashfs"), big, 0o644); err != nil {
		b.Fatal(err)
	}
	blobs := filepath.Join(tree, "bundle/registry/blobs/sha256")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		b.Fatal(err)
	}
	for i := 0; i < 2000; i++ {
		if err := os.WriteFile(filepath.Join(blobs, fmt.Sprintf("%064x", i)), big[i*100:i*100+4000], 0o644); err != nil {
			b.Fatal(err)
		}
	}
	ours := filepath.Join(dir, "ours.iso")
	theirs := filepath.Join(dir, "xorriso.iso")
	var tOurs, tTheirs time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if err := Write(context.Background(), Options{Tree: tree, Output: ours, Label: "BOOTSTICK", Epoch: testEpoch, Boot: &boot}); err != nil {
			b.Fatal(err)
		}
		tOurs += time.Since(start)

		start = time.Now()
		cmd := exec.Command("xorriso", "-as", "mkisofs", "-quiet", "-R", "-V", "BOOTSTICK", "-o", theirs,
			"-isohybrid-mbr", boot.MBR, "-c", boot.Catalog,
			"-b", boot.BIOSImage, "-no-emul-boot", "-boot-load-size", "4", "-boot-info-table",
			"-eltorito-alt-boot", "-e", boot.EFIImage, "-no-emul-boot", "-isohybrid-gpt-basdat", tree)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("xorriso: %v\n%s", err, out)
		}
		tTheirs += time.Since(start)
	}
	b.StopTimer()
	benchtable.Record(b, benchtable.Row{Group: "mkusb", Name: "ISO writer vs xorriso",
		Ours:   benchtable.Side{Name: "iso.Write", Value: tOurs.Seconds() / float64(b.N), Unit: "s"},
		Ref:    benchtable.Side{Name: "xorriso -as mkisofs", Value: tTheirs.Seconds() / float64(b.N), Unit: "s"},
		Better: "lower",
		What:   fmt.Sprintf("the same staged tree (a 128 MiB squashfs stand-in and 2000 small files, like an OCI layout) written as a hybrid BIOS and UEFI ISO, mean of %d runs each", b.N)})
}
