package zstdblob

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"os/exec"
	"testing"

	"github.com/bootstick/bootstick/internal/cas"
)

// TestOf: the copy decompresses with zstd(1), as a host's install does, to
// the blob's bytes, and is much smaller for a binary's kind of data; a
// second call gives the same copy from the store's record; made again
// after its blob is gone, it is the same bytes.
func TestOf(t *testing.T) {
	s, err := cas.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// Repetitive with noise, as a binary's sections are.
	rnd := rand.New(rand.NewPCG(1, 2))
	var data []byte
	words := [][]byte{[]byte("runtime.gopanic"), []byte("k8s.io/apimachinery"), {0, 0, 0, 0, 0x48, 0x8b}, []byte("github.com/")}
	for len(data) < 4<<20 {
		data = append(data, words[rnd.IntN(len(words))]...)
		data = append(data, byte(rnd.IntN(256)))
	}
	d, _, err := s.Put(bytes.NewReader(data), "")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c, err := Of(ctx, s, d)
	if err != nil {
		t.Fatal(err)
	}
	if c.Size >= int64(len(data))/2 {
		t.Errorf("the copy is %d bytes of %d", c.Size, len(data))
	}
	out, err := exec.Command("zstd", "-q", "-d", "-c", s.BlobPath(c.SHA256)).Output()
	if err != nil {
		t.Fatalf("zstd -d: %v", err)
	}
	if !bytes.Equal(out, data) {
		t.Fatalf("zstd -d gave %d bytes, not the blob's %d", len(out), len(data))
	}
	again, err := Of(ctx, s, d)
	if err != nil || again != c {
		t.Errorf("second call: %+v, %v; want %+v", again, err, c)
	}
	if err := os.Remove(s.BlobPath(c.SHA256)); err != nil {
		t.Fatal(err)
	}
	remade, err := Of(ctx, s, d)
	if err != nil || remade != c {
		t.Errorf("made again: %+v, %v; want the same bytes %+v", remade, err, c)
	}
	if _, err := Of(ctx, s, cas.DigestOf([]byte("not stored"))); err == nil {
		t.Error("a blob the store lacks: no error")
	}
}
