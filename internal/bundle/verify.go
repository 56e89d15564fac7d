package bundle

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"
	"sync"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/progress"
	"github.com/bootstick/bootstick/internal/registry"
)

// Verified is what VerifyFS checked.
type Verified struct {
	Files, Blobs int
	Bytes        int64
	// Problems are every mismatch, each naming its file or image.
	Problems []string
}

// VerifyFS checks a bundle against its lock: below root in fsys (a stick's
// ISO, or a bundle folder), it re-hashes every payload file the lock pins,
// every registry blob (each is named by its digest) and the extra files
// given (their paths within fsys), two at a time, and checks that each
// image of the lock is in the registry's index under its digest. prog
// counts the bytes hashed. Every problem is reported; the error is only
// for a cancelled context.
func VerifyFS(ctx context.Context, fsys fs.FS, root string, l *Lock, extra map[string]cas.Digest, prog progress.Progress) (*Verified, error) {
	return verifyFS(ctx, fsys, root, l, extra, prog, true)
}

// VerifyPayload is VerifyFS without the registry's blobs: the registry
// checks each blob's digest as it serves it, and never serves a corrupted
// one whole. (Measured in `make bench`; firstboot checks everything.)
func VerifyPayload(ctx context.Context, fsys fs.FS, root string, l *Lock, prog progress.Progress) (*Verified, error) {
	return verifyFS(ctx, fsys, root, l, nil, prog, false)
}

func verifyFS(ctx context.Context, fsys fs.FS, root string, l *Lock, extra map[string]cas.Digest, prog progress.Progress, withBlobs bool) (*Verified, error) {
	res := &Verified{}
	want := map[string]cas.Digest{}
	for fp, d := range l.PayloadFiles() {
		want[path.Join(root, fp)] = d
	}
	for fp, d := range extra {
		want[fp] = d
	}
	blobDir := path.Join(root, "registry", "blobs", "sha256")
	var blobs []fs.DirEntry
	if withBlobs {
		var err error
		blobs, err = fs.ReadDir(fsys, blobDir)
		if err != nil {
			res.Problems = append(res.Problems, fmt.Sprintf("%s: %v", blobDir, err))
		}
	}
	for _, b := range blobs {
		want[path.Join(blobDir, b.Name())] = cas.Digest("sha256:" + b.Name())
	}
	names := make([]string, 0, len(want))
	var total int64
	for fp := range want {
		names = append(names, fp)
		if info, err := fs.Stat(fsys, fp); err == nil {
			total += info.Size()
		}
	}
	sort.Strings(names)
	prog.Start("verifying the bundle", total)
	defer prog.Done()

	var mu sync.Mutex
	var wg sync.WaitGroup
	work := make(chan string)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for fp := range work {
				got, n, err := hashFS(fsys, fp, prog)
				mu.Lock()
				switch {
				case err != nil:
					res.Problems = append(res.Problems, fmt.Sprintf("%s: %v", fp, err))
				case got != want[fp]:
					res.Problems = append(res.Problems, fmt.Sprintf("%s: sha256 %s, the lock says %s", fp, got.Hex(), want[fp].Hex()))
				}
				res.Bytes += n
				if strings.HasPrefix(fp, blobDir+"/") {
					res.Blobs++
				} else {
					res.Files++
				}
				mu.Unlock()
			}
		}()
	}
feed:
	for _, fp := range names {
		select {
		case work <- fp:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return res, err
	}
	res.Problems = append(res.Problems, checkIndex(fsys, path.Join(root, "registry", "index.json"), l)...)
	sort.Strings(res.Problems)
	return res, nil
}

// checkIndex checks that every image of the lock is in the OCI index under
// its digest.
func checkIndex(fsys fs.FS, indexPath string, l *Lock) []string {
	f, err := fsys.Open(indexPath)
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", indexPath, err)}
	}
	defer f.Close()
	idx, err := v1.ParseIndexManifest(f)
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", indexPath, err)}
	}
	have := map[string]string{}
	for _, m := range idx.Manifests {
		if r, err := registry.ParseRef(m.Annotations[registry.AnnotationImageName]); err == nil {
			have[r.String()] = m.Digest.String()
		}
	}
	var out []string
	for ref, im := range l.ImageRefs() {
		switch got, ok := have[ref]; {
		case !ok:
			out = append(out, fmt.Sprintf("image %s: in the lock, not in the registry's index", im.Ref))
		case got != string(im.Digest):
			out = append(out, fmt.Sprintf("image %s: the registry's index has %s, the lock says %s", im.Ref, got, im.Digest))
		}
	}
	return out
}

// hashFS hashes a file of fsys, counting its bytes on prog.
func hashFS(fsys fs.FS, fp string, prog progress.Progress) (cas.Digest, int64, error) {
	f, err := fsys.Open(fp)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(h, progressWriter{prog}), f)
	if err != nil {
		return "", n, err
	}
	return cas.Digest(fmt.Sprintf("sha256:%x", h.Sum(nil))), n, nil
}

type progressWriter struct{ p progress.Progress }

func (w progressWriter) Write(b []byte) (int, error) {
	w.p.Add(int64(len(b)))
	return len(b), nil
}
