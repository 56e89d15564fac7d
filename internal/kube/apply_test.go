package kube

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	metal3 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	bpa "github.com/bootstick/bootstick/internal/bpa/v1alpha1"
	"github.com/bootstick/bootstick/internal/kubetest"
	"github.com/bootstick/bootstick/internal/render"
	"github.com/bootstick/bootstick/internal/site"
	"github.com/bootstick/bootstick/internal/sshkeys"
	"github.com/bootstick/bootstick/internal/testkit"
	"github.com/bootstick/bootstick/manifests"
)

var (
	secretsRes = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	bmhRes     = metal3.GroupVersion.WithResource("baremetalhosts")
	provRes    = bpa.GroupVersion.WithResource("provisionings")
)

// versions returns kind/name -> resourceVersion of every site object.
func versions(t testing.TB, cfg *rest.Config) map[string]string {
	t.Helper()
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for kind, res := range map[string]schema.GroupVersionResource{"Secret": secretsRes, "BareMetalHost": bmhRes, "Provisioning": provRes} {
		list, err := dyn.Resource(res).Namespace(render.Namespace).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range list.Items {
			out[kind+"/"+it.GetName()] = it.GetResourceVersion()
		}
	}
	return out
}

func changed(a, b map[string]string) []string {
	var out []string
	for k, v := range b {
		if a[k] != v {
			out = append(out, k)
		}
	}
	for k := range a {
		if _, ok := b[k]; !ok {
			out = append(out, k+" (gone)")
		}
	}
	sort.Strings(out)
	return out
}

func startCluster(t testing.TB) (*kubetest.Env, *Client) {
	t.Helper()
	env := kubetest.Start(t)
	c, err := New(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ApplyFS(context.Background(), manifests.FS, manifests.Files()); err != nil {
		t.Fatal(err)
	}
	return env, c
}

var siteYAML = testkit.SiteYAML

// testKey is one SSH key for every render, as firstboot keeps one.
var testKey = sync.OnceValues(func() (*sshkeys.KeyPair, error) { return sshkeys.Generate(nil) })

// renderSite renders a site for Apply.
func renderSite(t testing.TB, data string) []*unstructured.Unstructured {
	t.Helper()
	s, err := site.Parse("gen/site.yaml", []byte(data), site.Options{})
	if err != nil {
		t.Fatal(err)
	}
	key, err := testKey()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := render.Render(s, render.Options{SSHKey: key})
	if err != nil {
		t.Fatal(err)
	}
	us, err := render.Unstructured(objs)
	if err != nil {
		t.Fatal(err)
	}
	return us
}

// TestApplyTenHosts applies a 10-host site to a real kube-apiserver with
// the CRDs installed, re-applies it (nothing changes) and edits one host
// (only its objects change).
func TestApplyTenHosts(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real etcd and kube-apiserver from the toolchain")
	}
	env, c := startCluster(t)
	ctx := context.Background()
	data := siteYAML("ten", "t", 10, 7)
	objs := renderSite(t, data)
	if err := c.Apply(ctx, objs); err != nil {
		t.Fatal(err)
	}

	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	// List reads them typed, through the dynamic client.
	bmhs, err := List[metal3.BareMetalHost](ctx, c, bmhRes, render.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	if len(bmhs) != 10 {
		t.Fatalf("%d BareMetalHosts, want 10", len(bmhs))
	}
	macs := map[string]string{}
	for _, h := range bmhs {
		macs[h.Name] = h.Spec.BootMACAddress
		if h.Spec.BMC.CredentialsName != render.BMCSecretName(h.Name) {
			t.Errorf("%s: credentialsName %q", h.Name, h.Spec.BMC.CredentialsName)
		}
	}
	secrets, err := dyn.Resource(secretsRes).Namespace(render.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bmcSecrets := 0
	for _, s := range secrets.Items {
		if strings.HasSuffix(s.GetName(), "-bmc-secret") {
			bmcSecrets++
			pw, _, _ := unstructuredString(s.Object, "data", "password")
			if pw == "" {
				t.Errorf("%s has no password", s.GetName())
			}
		}
	}
	if bmcSecrets != 10 {
		t.Fatalf("%d BMC Secrets, want 10", bmcSecrets)
	}
	provs, err := dyn.Resource(provRes).Namespace(render.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(provs.Items) != 1 {
		t.Fatalf("%d Provisionings, want 1", len(provs.Items))
	}
	var prov bpa.Provisioning
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(provs.Items[0].Object, &prov); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, m := range prov.Spec.Masters {
		for name, v := range m {
			got[name] = v.MACaddress
		}
	}
	for _, w := range prov.Spec.Workers {
		for name, v := range w {
			got[name] = v.MACaddress
		}
	}
	if len(prov.Spec.Masters) != 3 || len(prov.Spec.Workers) != 7 {
		t.Errorf("%d masters and %d workers, want 3 and 7", len(prov.Spec.Masters), len(prov.Spec.Workers))
	}
	for i := 0; i < 10; i++ {
		name := fmt.Sprintf("t-host-%02d", i)
		want := fmt.Sprintf("52:54:00:07:00:%02x", i)
		if macs[name] != want || got[name] != want {
			t.Errorf("%s: BMH MAC %q, Provisioning MAC %q, want %q", name, macs[name], got[name], want)
		}
	}

	before := versions(t, env.Config)
	if err := c.Apply(ctx, renderSite(t, data)); err != nil {
		t.Fatal(err)
	}
	if ch := changed(before, versions(t, env.Config)); len(ch) != 0 {
		t.Fatalf("re-applying the same site changed %v", ch)
	}

	edited := strings.Replace(data, "52:54:00:07:00:03", "52:54:00:07:00:f3", 1)
	edited = strings.Replace(edited, "redfish://10.10.0.4/redfish/v1/Systems/1", "redfish://10.10.9.4/redfish/v1/Systems/1", 1)
	if edited == data {
		t.Fatal("edit did nothing")
	}
	if err := c.Apply(ctx, renderSite(t, edited)); err != nil {
		t.Fatal(err)
	}
	ch := changed(before, versions(t, env.Config))
	if want := []string{"BareMetalHost/t-host-03", "Provisioning/ten"}; strings.Join(ch, " ") != strings.Join(want, " ") {
		t.Fatalf("editing host 3 changed %v, want %v", ch, want)
	}
}

func unstructuredString(obj map[string]any, path ...string) (string, bool, error) {
	cur := any(obj)
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return "", false, nil
		}
		cur = m[p]
	}
	s, ok := cur.(string)
	return s, ok, nil
}

// BenchmarkValidateRenderApply100 loads, validates, renders and applies a
// new 100-host site each iteration (400 objects created); "reapply" applies
// an unchanged one (no writes).
func BenchmarkValidateRenderApply100(b *testing.B) {
	env, c := startCluster(b)
	_ = env
	ctx := context.Background()
	b.Run("create", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			data := siteYAML(fmt.Sprintf("c%d", i), fmt.Sprintf("c%d", i), 100, i)
			objs := renderSite(b, data)
			if err := c.Apply(ctx, objs); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("reapply", func(b *testing.B) {
		data := siteYAML("re", "re", 100, 200)
		if err := c.Apply(ctx, renderSite(b, data)); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if err := c.Apply(ctx, renderSite(b, data)); err != nil {
				b.Fatal(err)
			}
		}
	})
}
