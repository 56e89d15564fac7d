package controller

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	bpa "github.com/bootstick/bootstick/internal/bpa/v1alpha1"
	"github.com/bootstick/bootstick/internal/sshkeys"
)

// TestRedact: whatever shape of secret a message might carry by mistake
// never reaches an Event, and the note fits the events API.
func TestRedact(t *testing.T) {
	key, err := sshkeys.Generate(nil)
	if err != nil {
		t.Fatal(err)
	}
	const token = "abcdef.0123456789abcdef"
	const certKey = "5d817a4b93a6a26bb3fd2e8c2f3d1f9e2c5b4a6d7e8f90a1b2c3d4e5f6a7b8c9"
	kubeconfig := "client-key-data: " + strings.Repeat("TFMwdExTMUNSVWRKVGlCU1UwRWdVRkpKVmtGVVJTQkxSVmt0TFMwdExRbz0K", 3)
	for _, c := range []struct{ name, msg, secret string }{
		{"bootstrap token", "join: kubeadm said token " + token + " is invalid", token},
		{"certificate key", "join: --certificate-key " + certKey + " rejected", certKey},
		{"private key", "connect: " + string(key.Private), "PRIVATE KEY"},
		{"kubeconfig data", "init: " + kubeconfig, "TFMwdExTMUNSVWRKVGlCU1UwRWdVRkpKVmtGVVJTQkxSVmt0TFMwdExRbz0K"},
	} {
		got := redact(c.msg)
		if strings.Contains(got, c.secret) || !strings.Contains(got, "[redacted]") {
			t.Errorf("%s: redact(...) = %q", c.name, got)
		}
	}
	if got := redact("connect: cannot reach 10.0.0.5:22 over SSH: connection refused"); got != "connect: cannot reach 10.0.0.5:22 over SSH: connection refused" {
		t.Errorf("an ordinary message changed: %q", got)
	}
	if got := redact(strings.Repeat("é", 2000)); len(got) > maxNote || !strings.HasSuffix(got, "…") {
		t.Errorf("a long message: %d bytes", len(got))
	}
}

// TestOwnWritesDoNotRequeue: the BPA's status and finalizer writes do not
// wake the Provisioning's controller; a spec change, a deletion (both
// move the generation) and a new cluster label do.
func TestOwnWritesDoNotRequeue(t *testing.T) {
	old := &bpa.Provisioning{ObjectMeta: metav1.ObjectMeta{Name: "edge", Namespace: "metal3", Generation: 2, Labels: map[string]string{ClusterLabel: "edge"}}}
	for _, c := range []struct {
		name   string
		change func(p *bpa.Provisioning)
		want   bool
	}{
		{"status", func(p *bpa.Provisioning) { p.Status.Hosts = []bpa.HostStatus{{Name: "m1", State: bpa.HostReady}} }, false},
		{"finalizer", func(p *bpa.Provisioning) { p.Finalizers = []string{Finalizer} }, false},
		{"spec", func(p *bpa.Provisioning) { p.Generation++ }, true},
		{"deletion", func(p *bpa.Provisioning) { p.Generation++; p.DeletionTimestamp = &metav1.Time{} }, true},
		{"cluster label", func(p *bpa.Provisioning) { p.Labels = map[string]string{ClusterLabel: "other"} }, true},
	} {
		p := old.DeepCopy()
		c.change(p)
		if got := provisioningChanged.Update(event.UpdateEvent{ObjectOld: old, ObjectNew: p}); got != c.want {
			t.Errorf("%s: reconcile = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestReleaseKubeconfig: the kubeconfig Secret keeps no ownerReference to
// a Provisioning (a BPA before this one made it a controller reference),
// and keeps the others.
func TestReleaseKubeconfig(t *testing.T) {
	p := &bpa.Provisioning{ObjectMeta: metav1.ObjectMeta{Name: "edge", Namespace: "metal3", UID: "u-1"}}
	yes := true
	other := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "x", UID: "u-3"}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{
		{APIVersion: "bpa.akraino.org/v1alpha1", Kind: "Provisioning", Name: "edge", UID: "u-1", Controller: &yes, BlockOwnerDeletion: &yes},
		{APIVersion: "bpa.akraino.org/v1alpha1", Kind: "Provisioning", Name: "edge", UID: "u-0"}, // made before, deleted
		other,
	}}}
	if !release(s, p) || len(s.OwnerReferences) != 1 || s.OwnerReferences[0] != other {
		t.Errorf("ownerReferences = %+v, want only the ConfigMap's", s.OwnerReferences)
	}
	if release(s, p) {
		t.Errorf("released twice")
	}
}
