// Package osimage names the compute-node OS images a stick carries: the
// bundle's lock lists them, a site picks one per host by name, and render
// points each host's BareMetalHost at the file the bootstrap machine
// serves. It sits below all three so that none of them imports another
// for this.
package osimage

import (
	"path/filepath"
	"strings"
)

// Image is an OS image the bundle carries, as the bootstrap machine
// serves it.
type Image struct {
	// Name is what a site calls it: the file name without its extension.
	Name string
	// File is the file name under the served images folder.
	File string
	// SHA256 is the hex digest of the file.
	SHA256 string
	// Format is raw, qcow2, ...; empty lets Ironic detect it.
	Format string
}

// formats are the disk formats of OS image files, by extension.
var formats = map[string]string{".qcow2": "qcow2", ".raw": "raw", ".img": "raw"}

// FromFile is the OS image a file is, with its hex sha256, when its
// extension says it is one (.qcow2, .raw, .img).
func FromFile(file, sha256Hex string) (Image, bool) {
	ext := filepath.Ext(file)
	format, ok := formats[ext]
	if !ok {
		return Image{}, false
	}
	return Image{Name: strings.TrimSuffix(file, ext), File: file, SHA256: sha256Hex, Format: format}, true
}
