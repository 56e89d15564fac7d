package install

import (
	"context"
	"fmt"
	"strings"

	"github.com/bootstick/bootstick/internal/kubeadm"
)

const whatEncryption = "reading the cluster's encryption configuration"

// encryptionHeader opens the EncryptionConfiguration a master keeps. It
// is the same on every master and every run, so that the install can
// tell the cluster's file from another.
const encryptionHeader = "# Written by the bootstick BPA: the key that encrypts this cluster's Secrets in etcd.\n"

// EncryptionConfig is the EncryptionConfiguration a master of the
// cluster keeps at EncryptionConfigPath, under key (32 bytes). It holds
// the key.
func EncryptionConfig(key []byte) string {
	return string(kubeadm.EncryptionConfig(encryptionHeader, key))
}

// ReadEncryptionKey reads the key of the EncryptionConfiguration on a
// master; nil when the master has none (a cluster made before the BPA
// encrypted Secrets). The key is never in an error.
func ReadEncryptionKey(ctx context.Context, q Querier) ([]byte, error) {
	out, err := q.Query(ctx, whatEncryption, "cat "+EncryptionConfigPath+" 2>/dev/null || true")
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(string(out)) == "" {
		return nil, nil
	}
	key, err := kubeadm.EncryptionKey(out)
	if err != nil {
		return nil, fmt.Errorf("%s on the master: %w", EncryptionConfigPath, err)
	}
	return key, nil
}
