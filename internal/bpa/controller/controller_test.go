package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bootstick/bootstick/internal/kube"

	metal3 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bootstick/bootstick/internal/bpa/install"
	bpa "github.com/bootstick/bootstick/internal/bpa/v1alpha1"
	"github.com/bootstick/bootstick/internal/kubetest"
	"github.com/bootstick/bootstick/manifests"
)

// TestAgainstAPIServer runs the controller in-process against a real
// kube-apiserver with the CRDs from manifests/: it matches hosts to
// BareMetalHosts by MAC, follows a BareMetalHost's state, and reports the
// error when a BareMetalHost goes away.
func TestAgainstAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver from the toolchain")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env, c := apiServer(t, ctx)

	const ns = "metal3"
	macs := map[string]string{"master-0": "52:54:00:00:00:10", "worker-0": "52:54:00:00:00:20", "worker-1": "52:54:00:00:00:21"}
	// Two of three BareMetalHosts exist before the controller starts; the
	// third comes later. Their names differ from the hosts' on purpose.
	newBMH := func(name, mac string) *metal3.BareMetalHost {
		b := &metal3.BareMetalHost{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
		b.Spec.BootMACAddress = mac
		b.Spec.Online = true
		return b
	}
	for name, mac := range map[string]string{"bmh-a": strings.ToUpper(macs["master-0"]), "bmh-b": macs["worker-0"]} {
		if err := c.Create(ctx, newBMH(name, mac)); err != nil {
			t.Fatal(err)
		}
	}
	setState := func(name string, state metal3.ProvisioningState) {
		t.Helper()
		var b metal3.BareMetalHost
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &b); err != nil {
			t.Fatal(err)
		}
		b.Status.OperationalStatus = metal3.OperationalStatusOK
		b.Status.Provisioning.State = state
		if err := c.Status().Update(ctx, &b); err != nil {
			t.Fatal(err)
		}
	}
	setState("bmh-a", metal3.StateAvailable)

	p := &bpa.Provisioning{ObjectMeta: metav1.ObjectMeta{Name: "cluster", Namespace: ns}}
	p.Spec.Masters = []map[string]bpa.Master{{"master-0": {MACaddress: macs["master-0"], CPU: 4, Memory: "8Gi"}}}
	p.Spec.Workers = []map[string]bpa.Worker{{"worker-0": {MACaddress: macs["worker-0"]}}, {"worker-1": {MACaddress: macs["worker-1"], SRIOV: true}}}
	if err := c.Create(ctx, p); err != nil {
		t.Fatal(err)
	}

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- Run(runCtx, env.Config, Options{}) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	// expect waits until the hosts' status is want (name -> "bmh state
	// error-substring").
	expect := func(step string, want map[string]string) {
		t.Helper()
		var got map[string]string
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			var p bpa.Provisioning
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "cluster"}, &p); err != nil {
				t.Fatal(err)
			}
			got = map[string]string{}
			for _, h := range p.Status.Hosts {
				got[h.Name] = fmt.Sprintf("%s %s %s", h.BareMetalHost, h.State, h.Error)
			}
			ok := len(got) == len(want)
			for n, w := range want {
				ok = ok && strings.HasPrefix(got[n], w)
			}
			if ok {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("%s: status hosts = %q, want prefixes %q", step, got, want)
	}

	expect("start", map[string]string{
		"master-0": "bmh-a Matched ",
		"worker-0": "bmh-b Matched ",
		"worker-1": " Pending no BareMetalHost in namespace metal3 has boot MAC address 52:54:00:00:00:21",
	})

	if err := c.Create(ctx, newBMH("bmh-c", macs["worker-1"])); err != nil {
		t.Fatal(err)
	}
	expect("a BareMetalHost appears", map[string]string{"master-0": "bmh-a Matched", "worker-0": "bmh-b Matched", "worker-1": "bmh-c Matched"})

	setState("bmh-a", metal3.StateProvisioning)
	expect("provisioning", map[string]string{"master-0": "bmh-a Provisioning", "worker-0": "bmh-b Matched", "worker-1": "bmh-c Matched"})
	for _, n := range []string{"bmh-a", "bmh-b", "bmh-c"} {
		setState(n, metal3.StateProvisioned)
	}
	expect("provisioned", map[string]string{"master-0": "bmh-a Provisioned", "worker-0": "bmh-b Provisioned", "worker-1": "bmh-c Provisioned"})
	var got bpa.Provisioning
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "cluster"}, &got); err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(got.Status.Conditions, ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("conditions = %+v, want Ready=True", got.Status.Conditions)
	}
	// Without firstboot's install ConfigMap the BPA says why it waits.
	if c := meta.FindStatusCondition(got.Status.Conditions, ConditionClusterReady); c == nil || c.Reason != "NoInstallConfig" {
		t.Errorf("conditions = %+v, want ClusterReady NoInstallConfig", got.Status.Conditions)
	}

	if err := c.Delete(ctx, &metal3.BareMetalHost{ObjectMeta: metav1.ObjectMeta{Name: "bmh-b", Namespace: ns}}); err != nil {
		t.Fatal(err)
	}
	expect("a BareMetalHost is removed", map[string]string{
		"master-0": "bmh-a Provisioned", "worker-1": "bmh-c Provisioned",
		"worker-0": " Pending no BareMetalHost in namespace metal3 has boot MAC address 52:54:00:00:00:20",
	})

	// The spec changes: worker-1 leaves, observedGeneration follows.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "cluster"}, &got); err != nil {
			return err
		}
		got.Spec.Workers = got.Spec.Workers[:1]
		return c.Update(ctx, &got)
	}); err != nil {
		t.Fatal(err)
	}
	expect("a worker leaves the spec", map[string]string{"master-0": "bmh-a Provisioned", "worker-0": " Pending"})
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "cluster"}, &got); err != nil {
		t.Fatal(err)
	}
	if got.Status.ObservedGeneration != got.Generation {
		t.Errorf("observedGeneration = %d, generation %d", got.Status.ObservedGeneration, got.Generation)
	}
}

// apiServer starts etcd and kube-apiserver with the namespaces and the
// metal3 and BPA CRDs, and returns a client with the BPA's scheme.
func apiServer(t *testing.T, ctx context.Context) (*kubetest.Env, client.Client) {
	t.Helper()
	env := kubetest.Start(t)
	kc, err := kube.New(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	if err := kc.ApplyFS(ctx, manifests.FS, []string{"00-namespaces.yaml", "10-crds-metal3.yaml", "11-crd-bpa.yaml"}); err != nil {
		t.Fatal(err)
	}
	s, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(env.Config, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	return env, c
}

// rbacAPIServer is apiServer with the BPA's own Roles applied.
func rbacAPIServer(t *testing.T, ctx context.Context) (*kubetest.Env, client.Client) {
	t.Helper()
	env, c := apiServer(t, ctx)
	kc, err := kube.New(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	if err := kc.ApplyFS(ctx, manifests.FS, []string{"22-rbac-bpa.yaml"}); err != nil {
		t.Fatal(err)
	}
	return env, c
}

// installConfig is an installer configuration for tests: this cluster's
// packages, registry and flannel, and hosts.
func installConfig(hosts map[string]install.Host) *install.Config {
	return &install.Config{
		KubernetesVersion: "v1.34.4", PackagesURL: "http://127.0.0.1:1/packages/",
		Binaries: []install.Binary{{Name: "kubeadm"}, {Name: "kubelet"}, {Name: "kubectl"}, {Name: "flannel"},
			{Name: "cni-bridge"}, {Name: "cni-host-local"}, {Name: "cni-portmap"}, {Name: "cni-loopback"}},
		Registry: "http://127.0.0.1:5000", Mirrored: []string{"registry.k8s.io"}, PauseImage: "registry.k8s.io/pause:3.10.1",
		Plugins: map[string]install.Plugin{install.PluginFlannel: {Image: "docker.io/flannel/flannel:v0.27.4"}},
		Images: []install.Image{{Name: "docker.io/flannel/flannel:v0.27.4", Digest: "sha256:" + strings.Repeat("1", 64)},
			{Name: "registry.k8s.io/pause:3.10.1", Digest: "sha256:" + strings.Repeat("3", 64)}},
		Hosts: hosts,
	}
}
