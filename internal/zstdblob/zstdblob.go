// Package zstdblob makes zstd copies of the cache's blobs, each once: the
// stick carries the compute nodes' large binaries (kubeadm, kubelet,
// kubectl) compressed, and the hosts decompress them with zstd(1).
package zstdblob

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"github.com/klauspost/compress/zstd"

	"github.com/bootstick/bootstick/internal/cas"
)

// Level is the encoder's level: its best, since a copy is made once per
// binary and read from every stick built after.
const Level = zstd.SpeedBestCompression

// Copy is a blob's zstd copy in the store.
type Copy struct {
	SHA256 cas.Digest `json:"sha256"`
	Size   int64      `json:"size"`
}

// Blobs is the copy, for the store's action records.
func (c *Copy) Blobs() []cas.Digest { return []cas.Digest{c.SHA256} }

// Of returns blob d's zstd copy, making it the first time (the store
// remembers it under the blob, the level and the encoder's version). One
// goroutine encodes, so the copy is the same bytes on every machine with
// the same encoder.
func Of(ctx context.Context, s *cas.Store, d cas.Digest) (Copy, error) {
	key, err := cas.Key(struct {
		Step, Level, Encoder string
		Blob                 cas.Digest
	}{"zstd", Level.String(), encoderVersion(), d})
	if err != nil {
		return Copy{}, err
	}
	var c Copy
	if ok, err := s.GetAction(key, &c); err != nil || ok {
		return c, err
	}
	in, err := os.Open(s.BlobPath(d))
	if err != nil {
		return Copy{}, fmt.Errorf("compressing blob %s: %w", d, err)
	}
	defer in.Close()
	w, err := s.Create()
	if err != nil {
		return Copy{}, err
	}
	defer w.Abort()
	enc, err := zstd.NewWriter(w, zstd.WithEncoderLevel(Level), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return Copy{}, fmt.Errorf("compressing blob %s: %w", d, err)
	}
	if _, err := io.Copy(enc, ctxReader{ctx, in}); err != nil {
		enc.Close()
		return Copy{}, fmt.Errorf("compressing blob %s: %w", d, err)
	}
	if err := enc.Close(); err != nil {
		return Copy{}, fmt.Errorf("compressing blob %s: %w", d, err)
	}
	out, err := w.Commit("")
	if err != nil {
		return Copy{}, err
	}
	c = Copy{SHA256: out, Size: w.Size()}
	return c, s.PutAction(key, &c)
}

// encoderVersion is the zstd module's version this program was built with:
// another version may compress to other bytes.
func encoderVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == "github.com/klauspost/compress" {
				if m.Replace != nil {
					m = m.Replace
				}
				return m.Version
			}
		}
	}
	return "unknown"
}

// ctxReader stops a long copy when ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
