package controller

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/bootstick/bootstick/internal/bpa/install"
	bpa "github.com/bootstick/bootstick/internal/bpa/v1alpha1"
	"github.com/bootstick/bootstick/internal/testctx"
)

// TestEncryptionKeyOfTheCluster: the BPA makes the cluster's key for
// Secrets at rest once, keeps it in a Secret owned by nothing, gives the
// same key to every master's install and none to a worker, never shows
// it in the status, and, the Secret deleted while the cluster lives,
// reads the key back from a master rather than make another.
func TestEncryptionKeyOfTheCluster(t *testing.T) {
	ctx, cancel := testctx.New(t, time.Minute)
	defer cancel()
	ex := &install.Fake{}
	site := newFakeSite(t, ex, []string{"master-0", "master-1"}, []string{"worker-0"})
	p := site.untilReady(ctx)
	name := types.NamespacedName{Namespace: "metal3", Name: EncryptionSecretName("edge")}
	var s corev1.Secret
	if err := site.c.Get(ctx, name, &s); err != nil {
		t.Fatal(err)
	}
	key := s.Data[EncryptionKeyKey]
	if len(key) != 32 || len(s.OwnerReferences) != 0 || s.Labels[ClusterLabel] != "edge" {
		t.Fatalf("Secret %s: %d-byte key, owners %v, labels %v; want a 32-byte key owned by nothing, labelled with the cluster", name, len(key), s.OwnerReferences, s.Labels)
	}
	b64 := base64.StdEncoding.EncodeToString(key)
	for host, want := range map[string]bool{"master-0": true, "master-1": true, "worker-0": false} {
		if got := strings.Contains(ex.Script(host, bpa.PhaseInstall), "secret: "+b64); got != want {
			t.Errorf("%s's install carries the cluster's key: %v, want %v", host, got, want)
		}
	}
	if st, _ := json.Marshal(p.Status); bytes.Contains(st, []byte(b64)) {
		t.Error("the status shows the encryption key")
	}

	// Deleted alone, and then with the kubeconfig (both carry the
	// cluster's label): the masters still hold the key, which comes back.
	for _, also := range []string{"", KubeconfigSecretName("edge")} {
		if err := site.c.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: name.Namespace, Name: name.Name}}); err != nil {
			t.Fatal(err)
		}
		if also != "" {
			if err := site.c.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: name.Namespace, Name: also}}); err != nil {
				t.Fatal(err)
			}
		}
		site.pass(ctx)
		var back corev1.Secret
		if err := site.c.Get(ctx, name, &back); err != nil {
			t.Fatalf("the deleted key (with %q) was not stored again: %v", also, err)
		}
		if !bytes.Equal(back.Data[EncryptionKeyKey], key) {
			t.Errorf("the key stored again (with %q deleted) is not the one the masters hold", also)
		}
	}
	noLeaks(t, ex)
}
