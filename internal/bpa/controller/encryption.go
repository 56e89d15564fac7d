package controller

import (
	"context"
	"crypto/rand"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/bootstick/bootstick/internal/bpa/install"
	bpa "github.com/bootstick/bootstick/internal/bpa/v1alpha1"
)

// EncryptionSecretName names the Secret that keeps the key with which the
// application cluster's API servers encrypt its Secrets in etcd (key
// EncryptionKeyKey, 32 bytes). Like the kubeconfig's, it is owned by
// nothing: it outlives the Provisioning, and every master the cluster
// ever gets must have the same key.
func EncryptionSecretName(cluster string) string { return cluster + "-encryption-key" }

// EncryptionKeyKey is the key's entry in its Secret.
const EncryptionKeyKey = "key"

// ReasonEncryptionKeyStored: the Event when the BPA stored the key.
const ReasonEncryptionKeyStored = "EncryptionKeyStored"

// encryptionKey is the cluster's key for Secrets at rest, from its
// Secret. Without the Secret, it reads the key back from the disk of
// holder, a master of the living cluster (a new key if that cluster was
// made before the BPA encrypted Secrets), or, with no holder (no cluster
// yet), makes one; and stores it.
func (x *run) encryptionKey(ctx context.Context, holder *bpa.HostStatus) ([]byte, error) {
	name := EncryptionSecretName(x.cl.Name)
	var s corev1.Secret
	err := x.r.Client.Get(ctx, types.NamespacedName{Namespace: x.p.Namespace, Name: name}, &s)
	switch {
	case err == nil:
		if k := s.Data[EncryptionKeyKey]; len(k) == 32 {
			return k, nil
		}
		return nil, fmt.Errorf("Secret %s/%s: its %s is not a 32-byte key: delete the Secret only if the cluster does not exist yet, or restore it", x.p.Namespace, name, EncryptionKeyKey)
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("reading Secret %s/%s: %w", x.p.Namespace, name, err)
	}
	var key []byte
	from := "made for the new cluster"
	if holder != nil {
		m, err := x.client(ctx, holder)
		if err != nil {
			return nil, fmt.Errorf("reaching master %s for the cluster's encryption key: %w", holder.Name, err)
		}
		if key, err = install.ReadEncryptionKey(ctx, m); err != nil {
			return nil, fmt.Errorf("reading the cluster's encryption key on master %s: %w", holder.Name, err)
		}
		from = "read back from master " + holder.Name
		if key == nil {
			from = "made anew: master " + holder.Name + " has none, as a cluster made before the BPA encrypted Secrets (its API servers do not encrypt)"
		}
	}
	if key == nil {
		key = make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, fmt.Errorf("making the cluster's encryption key: %w", err)
		}
	}
	s = corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: x.p.Namespace, Labels: map[string]string{ClusterLabel: x.cl.Name}},
		Type: corev1.SecretTypeOpaque, Data: map[string][]byte{EncryptionKeyKey: key}}
	if err := x.r.Client.Create(ctx, &s); apierrors.IsAlreadyExists(err) {
		// Stored meanwhile (another pass): that one is the cluster's.
		return x.encryptionKey(ctx, nil)
	} else if err != nil {
		return nil, fmt.Errorf("storing the cluster's encryption key in Secret %s/%s: %w", x.p.Namespace, name, err)
	}
	x.r.event(ref(x.p), false, ReasonEncryptionKeyStored, "StoreEncryptionKey",
		fmt.Sprintf("the key that encrypts cluster %s's Secrets in etcd is in Secret %s/%s (%s)", x.cl.Name, x.p.Namespace, name, from))
	return key, nil
}
