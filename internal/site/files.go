package site

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// Limits on the files a site names: a credentials file is a few lines, a
// site of a thousand hosts well under a megabyte.
const (
	maxCredentialsFile = 64 << 10
	maxSiteFile        = 16 << 20
)

// readRegular reads a regular file of at most max bytes. A device, a FIFO,
// a folder or a larger file is refused at once, without reading it.
func readRegular(path string, max int64) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return nil, fmt.Errorf("cannot read it: %v", pe.Err)
		}
		return nil, errors.New("cannot read it")
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file (%s): name a file", kindOf(fi.Mode()))
	}
	if fi.Size() > max {
		return nil, fmt.Errorf("too large (%d bytes, at most %d)", fi.Size(), max)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, errors.New("cannot read it")
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, errors.New("cannot read it")
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("too large (more than %d bytes)", max)
	}
	return data, nil
}

func kindOf(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a folder"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	}
	return "not a plain file"
}
