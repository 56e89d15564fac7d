package registry

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"testing"
)

type failingWriter struct{ after int }

func (f *failingWriter) Write(p []byte) (int, error) {
	if f.after <= 0 {
		return 0, errors.New("connection reset")
	}
	f.after--
	return len(p), nil
}

// failingReader reads r, then fails with err where r ends.
type failingReader struct {
	r   io.Reader
	err error
}

func (f *failingReader) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if err == io.EOF {
		return n, f.err
	}
	return n, err
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// TestCopyVerified checks the verifying reader on its own: content that
// matches its digest goes through whole; content that does not never does.
func TestCopyVerified(t *testing.T) {
	content := bytes.Repeat([]byte("bootstick"), (3*chunk+17)/9) // three chunks and a bit
	bad := bytes.Clone(content)
	bad[chunk+5] ^= 0xff

	for _, tt := range []struct {
		name    string
		in      []byte // what the reader yields
		dgst    string // what it should hash to
		r       io.Reader
		w       io.Writer
		wantErr string // a substring; "" for none
		corrupt bool
	}{
		{name: "good", in: content, dgst: digestOf(content)},
		{name: "one chunk exactly", in: content[:chunk], dgst: digestOf(content[:chunk])},
		{name: "empty", in: nil, dgst: digestOf(nil)},
		{name: "a byte flipped", in: bad, dgst: digestOf(content), wantErr: "is corrupted", corrupt: true},
		{name: "a byte short", in: content[:len(content)-1], dgst: digestOf(content), wantErr: "is corrupted", corrupt: true},
		{name: "read fails", dgst: digestOf(content), r: &failingReader{r: bytes.NewReader(content[:chunk+1]), err: errors.New("i/o error")},
			wantErr: "reading blob: i/o error"},
		{name: "client goes", in: content, dgst: digestOf(content), w: &failingWriter{after: 1}, wantErr: "client went away: connection reset"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			r, w := tt.r, tt.w
			if r == nil {
				r = bytes.NewReader(tt.in)
			}
			if w == nil {
				w = &out
			}
			err := copyVerified(w, r, tt.dgst)
			if tt.wantErr == "" {
				if err != nil || !bytes.Equal(out.Bytes(), tt.in) {
					t.Fatalf("copied %d of %d bytes, err %v", out.Len(), len(tt.in), err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want %q", err, tt.wantErr)
			}
			var ce *corruptError
			if errors.As(err, &ce) != tt.corrupt {
				t.Errorf("err %v: a corruptError is %v, want %v", err, !tt.corrupt, tt.corrupt)
			}
			if errors.Is(err, errClientGone) != strings.HasPrefix(tt.wantErr, "client went away") {
				t.Errorf("err %v: errClientGone is %v", err, !strings.HasPrefix(tt.wantErr, "client went away"))
			}
			if tt.corrupt && out.Len() >= len(tt.in) {
				t.Errorf("sent all %d bytes of content that does not match its digest", out.Len())
			}
		})
	}
}
