package fetch

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/bootstick/bootstick/internal/cas"
)

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// readBlob reads a small blob (a manifest) from the cache.
func readBlob(store *cas.Store, d cas.Digest) ([]byte, error) {
	fi, err := os.Stat(store.BlobPath(d))
	if err != nil {
		return nil, fmt.Errorf("blob %s is not in the cache: %w", d, err)
	}
	if fi.Size() > 4<<20 {
		return nil, fmt.Errorf("blob %s is %d bytes: too large for a manifest", d, fi.Size())
	}
	return os.ReadFile(store.BlobPath(d))
}
