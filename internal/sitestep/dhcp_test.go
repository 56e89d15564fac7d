package sitestep

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	metal3 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/bootstick/bootstick/internal/dhcphosts"
	"github.com/bootstick/bootstick/internal/render"
	"github.com/bootstick/bootstick/internal/site"
)

// Against a real kube-apiserver with the manifests installed: the DHCP
// host list answers the site's hosts; a host the site drops is answered
// while its BareMetalHost is there (the operator deprovisions it through
// the deploy ramdisk, which asks DHCP for an address), and refused once
// it is gone; a BareMetalHost applied by hand is never added.
func TestDHCPHostsFollowRemoval(t *testing.T) {
	env, kc := apiServer(t)
	ctx := context.Background()
	dir := t.TempDir()
	list := filepath.Join(dir, "dhcp-hosts")
	three, _ := writeSite(t, t.TempDir(), 3)
	if _, _, err := Apply(ctx, kc, Options{Site: three, KeyDir: filepath.Join(dir, "ssh")}); err != nil {
		t.Fatal(err)
	}
	byHand := `{"apiVersion":"metal3.io/v1alpha1","kind":"BareMetalHost","metadata":{"name":"by-hand","namespace":"` + render.Namespace +
		`"},"spec":{"bootMACAddress":"52:54:00:00:09:09","online":false}}`
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	bmhs := dyn.Resource(metal3.GroupVersion.WithResource("baremetalhosts")).Namespace(render.Namespace)
	if _, err := bmhs.Patch(ctx, "by-hand", types.ApplyPatchType, []byte(byHand), metav1.PatchOptions{FieldManager: "kubectl"}); err != nil {
		t.Fatal(err)
	}
	check := func(when, sitePath string, want ...dhcphosts.Host) {
		t.Helper()
		e, err := site.ReadEarly(sitePath)
		if err != nil {
			t.Fatal(err)
		}
		if err := WriteDHCPHosts(ctx, kc, list, e); err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if got, err := dhcphosts.Read(list); err != nil || !slices.Equal(got, want) {
			t.Errorf("%s: the DHCP host list is %v (%v), want %v", when, got, err, want)
		}
	}
	host := func(i int, answer bool) dhcphosts.Host {
		return dhcphosts.Host{MAC: fmt.Sprintf("52:54:00:00:02:%02x", i), Answer: answer}
	}
	check("three hosts", three, host(0, true), host(1, true), host(2, true))

	if _, err := bmhs.Patch(ctx, "host-2", types.MergePatchType, []byte(`{"metadata":{"finalizers":["`+metal3.BareMetalHostFinalizer+`"]}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	two, _ := writeSite(t, t.TempDir(), 2)
	check("host-2 dropped from the site", two, host(0, true), host(1, true), host(2, true))
	if _, err := Prune(ctx, kc, "test", []string{"host-0", "host-1"}); err != nil {
		t.Fatal(err)
	}
	check("host-2 being deprovisioned", two, host(0, true), host(1, true), host(2, true))
	if _, err := bmhs.Patch(ctx, "host-2", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	check("host-2 gone", two, host(0, true), host(1, true), host(2, false))
}
