package completeness

import (
	"context"
	"errors"
	"strings"
	"testing"
)

const reg = "registry.test"

var have = map[string]string{
	reg + "/pause:3.10.1":            "sha256:" + strings.Repeat("1", 64),
	reg + "/kube-apiserver:v1.34.4":  "sha256:" + strings.Repeat("2", 64),
	reg + "/etcd:3.6.5-0":            "sha256:" + strings.Repeat("3", 64),
	reg + "/coredns/coredns:v1.12.1": "sha256:" + strings.Repeat("4", 64),
}

func refs() []string {
	var out []string
	for r := range have {
		out = append(out, r)
	}
	return out
}

const manifest = `apiVersion: v1
kind: Namespace
metadata: {name: demo}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: app, namespace: demo}
spec:
  template:
    spec:
      initContainers: [{name: init, image: ` + reg + `/pause:3.10.1}]
      containers:
      - {name: app, image: ` + reg + `/app:v2}
      - {name: by-digest, image: "` + reg + `/coredns/coredns:v1.12.1@sha256:` + "4444444444444444444444444444444444444444444444444444444444444444" + `"}
      - {name: wrong-repo, image: "` + reg + `/other@sha256:` + "4444444444444444444444444444444444444444444444444444444444444444" + `"}
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: job, namespace: demo}
spec:
  jobTemplate:
    spec:
      template:
        spec:
          containers: [{name: j, image: ` + reg + `/app:v2}]
`

func TestManifestImages(t *testing.T) {
	uses, err := ManifestImages("manifests/10-app.yaml", []byte(manifest))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"manifests/10-app.yaml: Deployment demo/app: spec.template.spec.containers[0] app",
		"manifests/10-app.yaml: Deployment demo/app: spec.template.spec.containers[1] by-digest",
		"manifests/10-app.yaml: Deployment demo/app: spec.template.spec.containers[2] wrong-repo",
		"manifests/10-app.yaml: Deployment demo/app: spec.template.spec.initContainers[0] init",
		"manifests/10-app.yaml: CronJob demo/job: spec.jobTemplate.spec.template.spec.containers[0] j",
	}
	if len(uses) != len(want) {
		t.Fatalf("uses %v", uses)
	}
	for i, u := range uses {
		if u.By != want[i] {
			t.Errorf("use %d: %q, want %q", i, u.By, want[i])
		}
	}
	if _, err := ManifestImages("bad.yaml", []byte("a: [")); err == nil || !strings.Contains(err.Error(), "bad.yaml") {
		t.Errorf("bad YAML: %v", err)
	}
}

// A missing image fails the check, naming the image and every user.
func TestMissingImage(t *testing.T) {
	in := Inputs{
		Manifests:         map[string][]byte{"10-app.yaml": []byte(manifest)},
		KubernetesVersion: "v1.34.4",
		Registry:          refs(),
		KubeadmImages: func(ctx context.Context, cfg []byte) ([]string, error) {
			if !strings.Contains(string(cfg), "imageRepository: "+reg) || !strings.Contains(string(cfg), "imageTag: 3.6.5-0") {
				t.Errorf("kubeadm config does not use the registry's images:\n%s", cfg)
			}
			return []string{reg + "/kube-apiserver:v1.34.4", reg + "/kube-scheduler:v1.34.4", reg + "/pause:3.10.1"}, nil
		},
	}
	uses, err := Collect(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	err = Check(uses, have)
	var me *MissingError
	if !errors.As(err, &me) {
		t.Fatalf("got %v", err)
	}
	if len(me.Missing) != 3 {
		t.Errorf("missing %v", me.Missing)
	}
	msg := err.Error()
	for _, want := range []string{
		reg + "/app:v2, referenced by:",
		"Deployment demo/app: spec.template.spec.containers[0] app",
		"CronJob demo/job",
		reg + "/kube-scheduler:v1.34.4, referenced by:\n    kubeadm init",
		// The digest is coredns's: the registry serves it only as coredns.
		reg + "/other@sha256:4444444444444444444444444444444444444444444444444444444444444444, referenced by:\n    manifests/10-app.yaml: Deployment demo/app: spec.template.spec.containers[2] wrong-repo",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "by-digest") || strings.Contains(msg, "pause") {
		t.Errorf("an image that is there was reported:\n%s", msg)
	}
}

func TestComplete(t *testing.T) {
	uses := []Use{{Image: reg + "/pause:3.10.1", By: "a"}, {Image: reg + "/etcd@" + have[reg+"/etcd:3.6.5-0"], By: "b"}}
	if err := Check(uses, have); err != nil {
		t.Fatal(err)
	}
	if _, err := KubeadmConfig("v1.34.4", nil); err == nil || !strings.Contains(err.Error(), "kube-apiserver") {
		t.Errorf("no control plane image: %v", err)
	}
}

func TestSiteObjects(t *testing.T) {
	// A BareMetalHost runs no container; a custom resource embedding a
	// pod template is walked like a pod, and named by its kind and name.
	bmh := map[string]any{"apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
		"metadata": map[string]any{"name": "node-0", "namespace": "metal3"},
		"spec":     map[string]any{"image": map[string]any{"url": "http://192.0.2.1/images/u.qcow2"}}}
	cr := map[string]any{"kind": "X", "metadata": map[string]any{"name": "b", "namespace": "a"},
		"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
			"containers": []any{map[string]any{"name": "c", "image": "x.test/y:1"}}}}}}
	uses, err := Collect(context.Background(), Inputs{KubernetesVersion: "v1.34.4", Registry: refs(),
		SiteObjects: []map[string]any{bmh, cr}})
	if err != nil {
		t.Fatal(err)
	}
	var site []Use
	for _, u := range uses {
		if strings.HasPrefix(u.By, "site:") {
			site = append(site, u)
		}
	}
	if len(site) != 1 || site[0].Image != "x.test/y:1" || site[0].By != "site: X a/b: spec.template.spec.containers[0] c" {
		t.Errorf("site uses %+v, want the custom resource's container only", site)
	}
}
