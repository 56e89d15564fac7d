package firstboot

import (
	"bytes"
	"io/fs"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/bootstick/bootstick/internal/kubeyaml"
	"github.com/bootstick/bootstick/internal/site"
	"github.com/bootstick/bootstick/manifests"
)

// Ironic listens on the site's provisioning address only: each of its
// probes is the kubelet's own HTTP request to that address, none an exec
// of curl in the container.
func TestIronicProbesAskProvisioningAddress(t *testing.T) {
	data, err := fs.ReadFile(manifests.FS, "32-ironic.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := kubeyaml.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	n := &node{sitePath: "/site/site.yaml", early: &site.Early{}}
	n.early.Bootstrap.Provisioning.Address = "172.22.0.1/24"
	checked := 0
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		var d appsv1.Deployment
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d); err != nil {
			t.Fatal(err)
		}
		if !d.Spec.Template.Spec.HostNetwork || d.Labels[LabelNeedsSite] != "true" {
			t.Fatalf("Deployment %s: want a Deployment on the host network that needs the site", d.Name)
		}
		u, err := probeProvisioningAddress(n, d)
		if err != nil {
			t.Fatal(err)
		}
		if _, has := u.Object["status"]; has || u.GetName() != "ironic" || u.GetKind() != "Deployment" {
			t.Errorf("the Deployment to apply: %s %s, status %v", u.GetKind(), u.GetName(), u.Object["status"])
		}
		var got appsv1.Deployment
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &got); err != nil {
			t.Fatal(err)
		}
		for _, c := range got.Spec.Template.Spec.Containers {
			if c.Name != "ironic" {
				continue
			}
			for what, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
				switch {
				case p == nil || p.HTTPGet == nil:
					t.Errorf("Ironic's %s probe is %+v, want an HTTP probe", what, p)
				case p.HTTPGet.Host != "172.22.0.1" || p.HTTPGet.Port.IntValue() != 6385 || p.HTTPGet.Scheme != corev1.URISchemeHTTPS:
					t.Errorf("Ironic's %s probe asks %s://%s:%s, want HTTPS://172.22.0.1:6385 (the API speaks HTTPS only)", what, p.HTTPGet.Scheme, p.HTTPGet.Host, p.HTTPGet.Port.String())
				}
			}
			checked++
		}
	}
	if checked != 1 {
		t.Fatalf("checked %d ironic containers, want 1", checked)
	}
}
