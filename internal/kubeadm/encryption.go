package kubeadm

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"go.yaml.in/yaml/v3"

	"github.com/bootstick/bootstick/internal/atomicfile"
)

type encryptionConfiguration struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Resources  []struct {
		Resources []string                    `yaml:"resources"`
		Providers []map[string]map[string]any `yaml:"providers"`
	} `yaml:"resources"`
}

// EnsureEncryptionConfig writes, once, an EncryptionConfiguration that
// encrypts Secrets with secretbox under a fresh 32-byte key, mode 0600 in a
// 0700 folder. An existing file is kept (the key must survive reboots and
// re-runs) after checking that it is one. It reports whether it created the
// file. Neither the key nor the file's content appears in any error.
func EnsureEncryptionConfig(path string) (created bool, err error) {
	if data, err := os.ReadFile(path); err == nil {
		if err := checkEncryptionConfig(data); err != nil {
			return false, fmt.Errorf("encryption config %s: %w; move it away only if no cluster uses it yet", path, err)
		}
		fi, err := os.Stat(path)
		if err != nil {
			return false, fmt.Errorf("encryption config %s: %w", path, err)
		}
		if fi.Mode().Perm() != 0o600 {
			if err := os.Chmod(path, 0o600); err != nil {
				return false, fmt.Errorf("encryption config %s: %w", path, err)
			}
		}
		return false, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("encryption config %s: %w", path, err)
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return false, fmt.Errorf("generating the encryption key: %w", err)
	}
	doc := EncryptionConfig("# Written once by firstboot: the key that encrypts Secrets in etcd.\n", key)
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, fmt.Errorf("encryption config: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return false, fmt.Errorf("encryption config: %w", err)
	}
	if err := atomicfile.Write(path, []byte(doc), 0o600); err != nil {
		return false, fmt.Errorf("encryption config: %w", err)
	}
	return true, nil
}

// EncryptionConfig is an EncryptionConfiguration that encrypts Secrets
// with secretbox under key (32 bytes), after header (comment lines). It
// holds the key: write it only to a file of mode 0600.
func EncryptionConfig(header string, key []byte) []byte {
	return []byte(header + fmt.Sprintf(`apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
  - resources: [secrets]
    providers:
      - secretbox:
          keys:
            - name: bootstick-1
              secret: %s
      - identity: {}
`, base64.StdEncoding.EncodeToString(key)))
}

// EncryptionKey is the secretbox key of an EncryptionConfig (as it
// wrote it), checked. Its errors never quote the file.
func EncryptionKey(data []byte) ([]byte, error) {
	if err := checkEncryptionConfig(data); err != nil {
		return nil, err
	}
	var ec struct {
		Resources []struct {
			Providers []struct {
				Secretbox *struct {
					Keys []struct {
						Secret string `yaml:"secret"`
					} `yaml:"keys"`
				} `yaml:"secretbox"`
			} `yaml:"providers"`
		} `yaml:"resources"`
	}
	if err := yaml.Unmarshal(data, &ec); err != nil {
		return nil, errors.New("not valid YAML")
	}
	for _, r := range ec.Resources {
		for _, pr := range r.Providers {
			if pr.Secretbox != nil && len(pr.Secretbox.Keys) > 0 {
				key, err := base64.StdEncoding.DecodeString(pr.Secretbox.Keys[0].Secret)
				if err != nil || len(key) != 32 {
					return nil, errors.New("its secretbox key is not 32 bytes in base64")
				}
				return key, nil
			}
		}
	}
	return nil, errors.New("it has no secretbox key")
}

// EncryptionAPIServer are the API server's extra arguments and volumes
// that make it read the EncryptionConfiguration at path on the node: its
// folder, mounted read-only at EncryptionMountPath.
func EncryptionAPIServer(path string) ([]Arg, []Volume) {
	return []Arg{{"encryption-provider-config", EncryptionMountPath + "/" + filepath.Base(path)}},
		[]Volume{{Name: "bootstick-encryption", HostPath: filepath.Dir(path), MountPath: EncryptionMountPath, ReadOnly: true, PathType: "DirectoryOrCreate"}}
}

func checkEncryptionConfig(data []byte) error {
	var ec encryptionConfiguration
	if err := yaml.Unmarshal(data, &ec); err != nil {
		return errors.New("not valid YAML")
	}
	if ec.APIVersion != "apiserver.config.k8s.io/v1" || ec.Kind != "EncryptionConfiguration" {
		return errors.New("not an apiserver.config.k8s.io/v1 EncryptionConfiguration")
	}
	for _, r := range ec.Resources {
		for _, res := range r.Resources {
			if res == "secrets" && len(r.Providers) > 0 {
				for name := range r.Providers[0] {
					if name == "identity" {
						return errors.New("its first provider for secrets is identity: Secrets would be stored unencrypted")
					}
				}
				return nil
			}
		}
	}
	return errors.New("it does not cover secrets")
}
