package firstboot

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// dataMarker is the file firstboot leaves in a data folder it made; reset
// removes only a folder that has it.
const dataMarker = ".bootstick-data"

// markOurs leaves the marker in a data folder firstboot uses.
func markOurs(data string) error {
	if err := os.MkdirAll(data, 0o755); err != nil {
		return err
	}
	p := filepath.Join(data, dataMarker)
	if fileExists(p) {
		return nil
	}
	return os.WriteFile(p, []byte("firstboot keeps its state in this folder; `firstboot reset --data "+data+"` removes it\n"), 0o644)
}

// checkOurs refuses a data folder that firstboot did not make: reset
// deletes it whole, and --data /var/lib would wipe the host.
func checkOurs(data string) error {
	fi, err := os.Stat(data)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // nothing there to remove
	}
	if err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("reset: --data %s is not a folder", data)
	}
	if !fileExists(filepath.Join(data, dataMarker)) {
		return fmt.Errorf("reset: refusing to remove %s: it has no %s, so firstboot did not make it (reset deletes the whole --data folder); "+
			"pass the --data that `firstboot run` used", data, dataMarker)
	}
	return nil
}
