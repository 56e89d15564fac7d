package firstboot

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/bootstick/bootstick/internal/bundle"
	"github.com/bootstick/bootstick/internal/logctx"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/bootstick/bootstick/internal/kube"
	"github.com/bootstick/bootstick/internal/kubeyaml"
	"github.com/bootstick/bootstick/internal/pipeline"
	"github.com/bootstick/bootstick/internal/render"
	"github.com/bootstick/bootstick/manifests"
)

// manifestsStep applies the bundle's manifests (or, for a bare OCI layout
// in host mode, the ones built into firstboot) in order with server-side
// apply, waiting for each CRD to be established and, after each file, for
// the file's Deployments to be available. A Deployment whose images the
// bundle's registry lacks is left out (it could not start offline), as
// mkusb leaves its manifest off a stick (manifests.ifImagesPresent).
func manifestsStep(n *node) pipeline.Step {
	return pipeline.Step{
		Name: "manifests",
		Hint: "kubectl get pods -A shows the pods that do not start; rerunning applies the manifests again",
		Run: func(ctx context.Context, pc *pipeline.Context) error {
			fsys, names, own, err := manifestFiles(ctx, n)
			if err != nil {
				return err
			}
			c, err := kube.Load(n.kubeconfig)
			if err != nil {
				return err
			}
			// firstboot's own manifests name images by tag: each is pinned
			// to the digest the bundle's layout holds, as mkusb pins a
			// stick's manifests, so a pod runs the very image the bundle
			// carries in every mode.
			var pin map[string]bundle.LockedImage
			if own {
				pin = n.bundle.lockedImages()
			}
			for _, name := range names {
				if err := applyManifest(ctx, n, c, fsys, name, pin); err != nil {
					return fmt.Errorf("manifest %s: %w", name, err)
				}
			}
			return nil
		},
	}
}

// manifestFiles are the bundle's manifests/*.yaml in name order, or
// firstboot's own (own) where a bundle (outside appliance mode) has none.
func manifestFiles(ctx context.Context, n *node) (fs.FS, []string, bool, error) {
	dir := filepath.Join(n.bundle.dir, "manifests")
	entries, err := os.ReadDir(dir)
	switch {
	case err == nil:
	case n.opts.mode == "appliance":
		return nil, nil, false, fmt.Errorf("the bundle has no manifests folder %s: %w", dir, err)
	default:
		logctx.From(ctx).Info("the bundle has no manifests folder; applying firstboot's own, each image pinned to the digest the bundle holds", "folder", dir)
		return manifests.FS, manifests.Files(), true, nil
	}
	var names []string
	for _, en := range entries {
		if !en.IsDir() && (strings.HasSuffix(en.Name(), ".yaml") || strings.HasSuffix(en.Name(), ".yml")) {
			names = append(names, en.Name())
		}
	}
	slices.Sort(names)
	return os.DirFS(dir), names, false, nil
}

// applyManifest applies one manifest, each image pinned to its digest in
// pin when pin is given, and waits for its Deployments.
func applyManifest(ctx context.Context, n *node, c *kube.Client, fsys fs.FS, name string, pin map[string]bundle.LockedImage) error {
	data, err := fs.ReadFile(fsys, name)
	if err != nil {
		return fmt.Errorf("reading manifest: %w", err)
	}
	if pin != nil {
		data = bundle.PinImages(data, pin)
	}
	objs, err := kubeyaml.Decode(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("reading manifest %s: %w", name, err)
	}
	var apply []*unstructured.Unstructured
	var wait []appsv1.Deployment
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			apply = append(apply, o)
			continue
		}
		var d appsv1.Deployment
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d); err != nil {
			return fmt.Errorf("Deployment %s: %w", o.GetName(), err)
		}
		if missing := missingImages(d, n.bundle.has); len(missing) > 0 {
			logctx.From(ctx).Warn("left out a Deployment whose images the bundle lacks", "manifest", name, "deployment", d.Namespace+"/"+d.Name, "images", missing)
			continue
		}
		if d.Labels[LabelNeedsSite] == "true" {
			// Its settings come from the site (the metal3 step, which
			// waits for it).
			if n.sitePath == "" {
				logctx.From(ctx).Info("no site: left out a Deployment that serves the site", "manifest", name, "deployment", d.Namespace+"/"+d.Name)
				continue
			}
			if d.Spec.Template.Spec.HostNetwork {
				if o, err = probeProvisioningAddress(n, d); err != nil {
					return err
				}
			}
			apply = append(apply, o)
			continue
		}
		apply, wait = append(apply, o), append(wait, d)
	}
	if err := c.Apply(ctx, apply); err != nil {
		return err
	}
	for _, d := range wait {
		if err := c.WaitDeployment(ctx, d.Namespace, d.Name, n.opts.timeout); err != nil {
			return err
		}
		logctx.From(ctx).Info("available", "deployment", d.Namespace+"/"+d.Name)
	}
	logctx.From(ctx).Info("applied", "manifest", name, "objects", len(apply))
	return nil
}

// probeProvisioningAddress points d's HTTP probes at the site's
// provisioning address. A Deployment that serves the site on the host
// network (Ironic) listens there only, and the kubelet asks a probe with
// no host at the node's address. An HTTP probe is the kubelet's own
// request; an exec probe (curl in the container) started runc, a shell
// and curl every 10 s on a bootstrap machine that may have few cores.
func probeProvisioningAddress(n *node, d appsv1.Deployment) (*unstructured.Unstructured, error) {
	early, err := n.site()
	if err != nil {
		return nil, err
	}
	if early == nil {
		return nil, fmt.Errorf("Deployment %s serves the site, and site %s was not read", d.Name, n.sitePath)
	}
	ip, err := render.ProvisioningIP(early.Bootstrap.Provisioning)
	if err != nil {
		return nil, fmt.Errorf("site %s: %w", n.sitePath, err)
	}
	spec := &d.Spec.Template.Spec
	for i := range spec.Containers {
		c := &spec.Containers[i]
		for _, p := range []*corev1.Probe{c.StartupProbe, c.ReadinessProbe, c.LivenessProbe} {
			if p != nil && p.HTTPGet != nil && p.HTTPGet.Host == "" {
				p.HTTPGet.Host = ip.String()
			}
		}
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&d)
	if err != nil {
		return nil, fmt.Errorf("Deployment %s: %w", d.Name, err)
	}
	delete(obj, "status")
	return &unstructured.Unstructured{Object: obj}, nil
}

func missingImages(d appsv1.Deployment, has func(ref string) bool) []string {
	var out []string
	spec := d.Spec.Template.Spec
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		if !has(c.Image) {
			out = append(out, c.Image)
		}
	}
	return out
}
