package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metal3 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	"golang.org/x/crypto/ssh"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/bootstick/bootstick/internal/bpa/install"
	bpa "github.com/bootstick/bootstick/internal/bpa/v1alpha1"
	"github.com/bootstick/bootstick/internal/sshkeys"
	"github.com/bootstick/bootstick/internal/sshtest"
)

// The BPA's ServiceAccount, as the API server sees it.
const bpaUser = "system:serviceaccount:bpa-system:bpa"

var bpaGroups = []string{"system:serviceaccounts", "system:serviceaccounts:bpa-system", "system:authenticated"}

// TestRunsWithItsOwnRBAC runs the BPA as its ServiceAccount, with only
// the rules manifests/22-rbac-bpa.yaml gives it, against a real
// kube-apiserver (RBAC on), and deletes its Provisioning:
//   - it elects itself leader, watches, reads the install ConfigMap and
//     the SSH key, writes the status, a finalizer and Events;
//   - an externally provisioned host the site gives no address is in
//     Error saying so (tried again after its backoff, dialling nothing);
//   - no Event holds the SSH key or the kubeconfig;
//   - deleting the Provisioning leaves the kubeconfig Secret, released
//     from the ownerReference a BPA before this one set (the garbage
//     collector, which this API server runs without, would have
//     followed it);
//   - a ContainerPackages gets its finalizer and a status waiting for
//     the cluster, and goes when deleted (nothing was installed);
//   - it cannot list or watch Secrets anywhere, nor read them outside
//     its namespace.
func TestRunsWithItsOwnRBAC(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver from the toolchain")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env, c := rbacAPIServer(t, ctx)
	ns := DefaultNamespace

	key, err := sshkeys.Generate(nil)
	if err != nil {
		t.Fatal(err)
	}
	hostKey, err := sshkeys.Generate(nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := installConfig(map[string]install.Host{"master-0": {HostKey: strings.TrimSpace(string(hostKey.Public))}})
	data, err := cfg.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	const kubeconfig = "apiVersion: v1\nkind: Config\nusers:\n- name: admin\n  user:\n    client-key-data: a2V5LW9mLXRoZS1hZG1pbi1vZi1lZGdlLWNsdXN0ZXItbmV2ZXItaW4tYW4tZXZlbnQ=\n"
	p := &bpa.Provisioning{ObjectMeta: metav1.ObjectMeta{Name: "edge", Namespace: ns}}
	p.Spec.Masters = []map[string]bpa.Master{{"master-0": {MACaddress: "52:54:00:00:00:10"}}}
	b := &metal3.BareMetalHost{ObjectMeta: metav1.ObjectMeta{Name: "bmh-a", Namespace: ns}}
	b.Spec.BootMACAddress, b.Spec.Online, b.Spec.ExternallyProvisioned = "52:54:00:00:00:10", true, true
	for _, o := range []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: SSHKeySecret, Namespace: ns}, Type: corev1.SecretTypeSSHAuth,
			Data: map[string][]byte{corev1.SSHAuthPrivateKey: key.Private}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: install.ConfigMapName, Namespace: ns}, Data: map[string]string{install.ConfigKey: data}},
		b, p,
	} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	b.Status.OperationalStatus, b.Status.Provisioning.State = metal3.OperationalStatusOK, metal3.StateExternallyProvisioned
	if err := c.Status().Update(ctx, b); err != nil {
		t.Fatal(err)
	}
	// The kubeconfig Secret as the BPA before this one made it: owned by
	// the Provisioning.
	old := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: KubeconfigSecretName("edge"), Namespace: ns, Labels: map[string]string{ClusterLabel: "edge"}},
		Data: map[string][]byte{KubeconfigKey: []byte(kubeconfig)}}
	if err := controllerutil.SetControllerReference(p, old, c.Scheme()); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, old); err != nil {
		t.Fatal(err)
	}

	sa := rest.CopyConfig(env.Config)
	sa.Impersonate = rest.ImpersonationConfig{UserName: bpaUser, Groups: bpaGroups}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- Run(runCtx, sa, Options{SkipNameValidation: true, LeaderElect: true, LeaderElectionNamespace: "bpa-system"})
	}()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	// until polls until ok holds, failing with what it last saw.
	until := func(what string, ok func() (bool, string)) {
		t.Helper()
		last := ""
		for ctx.Err() == nil {
			var good bool
			if good, last = ok(); good {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("%s: never; last %s", what, last)
	}
	until("a finalizer and the host in Error saying why", func() (bool, string) {
		var got bpa.Provisioning
		if err := c.Get(ctx, client.ObjectKeyFromObject(p), &got); err != nil {
			t.Fatal(err)
		}
		if len(got.Status.Hosts) != 1 {
			return false, "no host status"
		}
		h := got.Status.Hosts[0]
		return controllerutil.ContainsFinalizer(&got, Finalizer) && h.State == bpa.HostError &&
			strings.Contains(h.Error, "host master-0 has no address"), fmt.Sprintf("%s: %s", h.State, h.Error)
	})
	until("Events of the phase and its failure", func() (bool, string) {
		reasons := eventReasons(ctx, t, c, ns, key.Private, []byte(kubeconfig))
		return reasons[ReasonPhaseStarted] && reasons[ReasonPhaseFailed], fmt.Sprint(reasons)
	})

	// Its ContainerPackages: a finalizer, and a status that waits for
	// the cluster.
	cp := &bpa.ContainerPackages{ObjectMeta: metav1.ObjectMeta{Name: "edge-packages", Namespace: ns},
		Spec: bpa.ContainerPackagesSpec{Cluster: "edge", Packages: []string{install.PluginFlannel}}}
	if err := c.Create(ctx, cp); err != nil {
		t.Fatal(err)
	}
	until("the ContainerPackages waiting for the cluster", func() (bool, string) {
		var got bpa.ContainerPackages
		if err := c.Get(ctx, client.ObjectKeyFromObject(cp), &got); err != nil {
			t.Fatal(err)
		}
		ok := controllerutil.ContainsFinalizer(&got, PackagesFinalizer) && len(got.Status.Packages) == 1 &&
			got.Status.Packages[0].State == bpa.PackageWaiting && strings.HasPrefix(got.Status.Packages[0].Message, "cluster edge is not Ready: ")
		return ok, fmt.Sprintf("%v %+v", got.Finalizers, got.Status.Packages)
	})
	if err := c.Delete(ctx, cp); err != nil {
		t.Fatal(err)
	}
	until("the ContainerPackages gone (nothing was installed)", func() (bool, string) {
		err := c.Get(ctx, client.ObjectKeyFromObject(cp), &bpa.ContainerPackages{})
		return apierrors.IsNotFound(err), fmt.Sprint("err ", err)
	})

	// Deleted: the BPA lets it go, the kubeconfig stays and is released.
	if err := c.Delete(ctx, p); err != nil {
		t.Fatal(err)
	}
	until("the Provisioning gone", func() (bool, string) {
		err := c.Get(ctx, client.ObjectKeyFromObject(p), &bpa.Provisioning{})
		return apierrors.IsNotFound(err), fmt.Sprint("err ", err)
	})
	var s corev1.Secret
	if err := c.Get(ctx, client.ObjectKeyFromObject(old), &s); err != nil {
		t.Fatalf("the kubeconfig Secret after the Provisioning's deletion: %v", err)
	}
	if len(s.OwnerReferences) != 0 || string(s.Data[KubeconfigKey]) != kubeconfig || s.Labels[ClusterLabel] != "edge" {
		t.Errorf("the kubeconfig Secret after the Provisioning's deletion: owners %+v, labels %v", s.OwnerReferences, s.Labels)
	}
	until("an Event of the deletion", func() (bool, string) {
		reasons := eventReasons(ctx, t, c, ns, key.Private, []byte(kubeconfig))
		return reasons[ReasonDeleting], fmt.Sprint(reasons)
	})

	// What the BPA may and may not do.
	for _, c := range []struct {
		attr authorizationv1.ResourceAttributes
		want bool
	}{
		{authorizationv1.ResourceAttributes{Namespace: ns, Verb: "get", Resource: "secrets", Name: SSHKeySecret}, true},
		{authorizationv1.ResourceAttributes{Namespace: ns, Verb: "update", Group: "bpa.akraino.org", Resource: "provisionings"}, true},
		{authorizationv1.ResourceAttributes{Namespace: ns, Verb: "list", Resource: "secrets"}, false},
		{authorizationv1.ResourceAttributes{Namespace: ns, Verb: "watch", Resource: "secrets"}, false},
		{authorizationv1.ResourceAttributes{Verb: "list", Resource: "secrets"}, false},
		{authorizationv1.ResourceAttributes{Namespace: "kube-system", Verb: "get", Resource: "secrets", Name: "any"}, false},
		{authorizationv1.ResourceAttributes{Namespace: "bpa-system", Verb: "get", Resource: "secrets", Name: "any"}, false},
		{authorizationv1.ResourceAttributes{Namespace: ns, Verb: "delete", Resource: "secrets", Name: KubeconfigSecretName("edge")}, false},
		{authorizationv1.ResourceAttributes{Namespace: ns, Verb: "get", Resource: "configmaps", Name: "another"}, false},
		{authorizationv1.ResourceAttributes{Namespace: ns, Verb: "create", Group: "batch", Resource: "jobs"}, false},
		{authorizationv1.ResourceAttributes{Namespace: "other", Verb: "list", Group: "bpa.akraino.org", Resource: "provisionings"}, false},
		{authorizationv1.ResourceAttributes{Namespace: ns, Verb: "update", Group: "metal3.io", Resource: "baremetalhosts"}, false},
		// A host applied with kubectl: its user data, then one patch.
		{authorizationv1.ResourceAttributes{Namespace: ns, Verb: "patch", Group: "metal3.io", Resource: "baremetalhosts", Name: "any"}, true},
		{authorizationv1.ResourceAttributes{Namespace: ns, Verb: "create", Resource: "secrets"}, true},
		{authorizationv1.ResourceAttributes{Namespace: ns, Verb: "delete", Group: "metal3.io", Resource: "baremetalhosts", Name: "any"}, false},
		{authorizationv1.ResourceAttributes{Namespace: "other", Verb: "patch", Group: "metal3.io", Resource: "baremetalhosts", Name: "any"}, false},
		// ContainerPackages: the KUDPlugins' made, each one's finalizer
		// and status; never deleted.
		{authorizationv1.ResourceAttributes{Namespace: ns, Verb: "create", Group: "bpa.akraino.org", Resource: "containerpackages"}, true},
		{authorizationv1.ResourceAttributes{Namespace: ns, Verb: "update", Group: "bpa.akraino.org", Resource: "containerpackages", Subresource: "status"}, true},
		{authorizationv1.ResourceAttributes{Namespace: ns, Verb: "delete", Group: "bpa.akraino.org", Resource: "containerpackages", Name: "any"}, false},
	} {
		r, err := env.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: bpaUser, Groups: bpaGroups, ResourceAttributes: &c.attr}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status.Allowed != c.want {
			t.Errorf("may the BPA %s %s %s/%s? %v, want %v", c.attr.Verb, c.attr.Resource, c.attr.Namespace, c.attr.Name, r.Status.Allowed, c.want)
		}
	}
}

// TestStoreKubeconfigOwnedByNothing: the BPA stores the admin kubeconfig,
// as its ServiceAccount, in a Secret labelled with the cluster's name and
// owned by nothing, and says so in an Event that holds none of it.
func TestStoreKubeconfigOwnedByNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver from the toolchain")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env, c := rbacAPIServer(t, ctx)
	key, err := sshkeys.Generate(nil)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.ParsePrivateKey(key.Private)
	if err != nil {
		t.Fatal(err)
	}
	const kubeconfig = "apiVersion: v1\nkind: Config\nusers:\n- name: admin\n  user:\n    client-key-data: a2V5LW9mLXRoZS1hZG1pbi1vZi1lZGdlLWNsdXN0ZXItbmV2ZXItaW4tYW4tZXZlbnQ=\n"
	srv := sshtest.Start(t, signer.PublicKey(), func(string, string) (string, string, uint32) { return kubeconfig, "", 0 })
	m, err := install.Dial(ctx, srv.Addr, signer, srv.HostKey)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()

	sa := rest.CopyConfig(env.Config)
	sa.Impersonate = rest.ImpersonationConfig{UserName: bpaUser, Groups: bpaGroups}
	saClient, err := client.New(sa, client.Options{Scheme: c.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	rec := events.NewFakeRecorder(10)
	p := &bpa.Provisioning{ObjectMeta: metav1.ObjectMeta{Name: "edge", Namespace: DefaultNamespace, UID: "u-1", Labels: map[string]string{ClusterLabel: "tokyo"}}}
	x := &run{r: &Reconciler{Client: saClient, Recorder: rec}, p: p, cl: install.Cluster{Name: clusterName(p)}, now: time.Now}
	for range 2 { // made, then found unchanged
		if err := x.storeKubeconfig(ctx, install.NewSSHExecutor("master-0", m)); err != nil {
			t.Fatal(err)
		}
	}
	var s corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: DefaultNamespace, Name: "tokyo-kubeconfig"}, &s); err != nil {
		t.Fatal(err)
	}
	if len(s.OwnerReferences) != 0 || s.Labels[ClusterLabel] != "tokyo" || string(s.Data[KubeconfigKey]) != kubeconfig || p.Status.KubeconfigSecret != s.Name {
		t.Errorf("kubeconfig Secret: owners %+v, labels %v, status names %q", s.OwnerReferences, s.Labels, p.Status.KubeconfigSecret)
	}
	close(rec.Events)
	var got []string
	for e := range rec.Events {
		got = append(got, e)
	}
	if len(got) != 1 || !strings.HasPrefix(got[0], "Normal KubeconfigStored ") || !strings.Contains(got[0], "Secret metal3/tokyo-kubeconfig") ||
		strings.Contains(got[0], "client-key-data") {
		t.Errorf("events = %q, want one KubeconfigStored naming the Secret and not its content", got)
	}
}

// eventReasons lists the reasons of the Events in ns, failing the test if
// any note holds one of secrets.
func eventReasons(ctx context.Context, t *testing.T, c client.Client, ns string, secrets ...[]byte) map[string]bool {
	t.Helper()
	var list eventsv1.EventList
	if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, e := range list.Items {
		for _, s := range secrets {
			if strings.Contains(e.Note, strings.TrimSpace(string(s))) || strings.Contains(e.Note, "PRIVATE KEY") {
				t.Fatalf("Event %s %s holds a secret: %s", e.Reason, e.Action, e.Note)
			}
		}
		if e.ReportingController != EventRecorderName || e.Regarding.Kind != "Provisioning" {
			t.Errorf("Event %s from %q about %+v", e.Reason, e.ReportingController, e.Regarding)
		}
		out[e.Reason] = true
	}
	return out
}
