package kubeadm

import (
	"encoding/pem"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Torn lists the files under dirs that a power cut left damaged: kubeadm
// writes its certificates, kubeconfigs and manifests without syncing
// them, so after a cut they can be empty or cut short. A file is damaged
// when it is empty, a .crt/.key/.pub/.pem that is not whole PEM, or a
// .conf/.yaml that is not YAML, or any file holding NUL bytes (these are
// all text). A path may name a file. Missing paths are skipped.
func Torn(dirs ...string) ([]string, error) {
	var bad []string
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				if os.IsNotExist(err) {
					return nil
				}
				return err
			}
			if !d.Type().IsRegular() {
				return nil
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if why := damaged(path, data); why != "" {
				bad = append(bad, path+" ("+why+")")
			}
			return nil
		})
		if err != nil {
			return bad, fmt.Errorf("checking kubeadm's files in %s: %w", dir, err)
		}
	}
	return bad, nil
}

func damaged(path string, data []byte) string {
	if len(data) == 0 {
		return "empty"
	}
	if strings.IndexByte(string(data), 0) >= 0 {
		return "NUL bytes" // blocks allocated, data never written
	}
	switch filepath.Ext(path) {
	case ".crt", ".key", ".pub", ".pem":
		rest := data
		n := 0
		for {
			var b *pem.Block
			b, rest = pem.Decode(rest)
			if b == nil {
				break
			}
			n++
		}
		if n == 0 || strings.TrimSpace(string(rest)) != "" {
			return "not whole PEM"
		}
	case ".conf", ".yaml":
		var v any
		if err := yaml.Unmarshal(data, &v); err != nil || v == nil {
			return "not YAML"
		}
	}
	return ""
}
