package firstboot

import (
	"context"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/bootstick/bootstick/internal/pipeline"
	"github.com/bootstick/bootstick/internal/render"
	"github.com/bootstick/bootstick/internal/sitestep"
	"github.com/bootstick/bootstick/manifests"
)

func (p paths) sshKeyDir() string   { return filepath.Join(p.Data, "ssh") }
func (p paths) ageIdentity() string { return filepath.Join(p.Data, "age", "identity.txt") }
func (p paths) hostsFile() string   { return filepath.Join(p.State, "hosts.json") }

// sitePath is --site, else the site embedded in the bundle, else "".
func (e *env) sitePath(ctx context.Context) (string, error) {
	if e.opts.site != "" {
		return e.opts.site, nil
	}
	if err := e.findBundle(ctx); err != nil {
		return "", err
	}
	p := filepath.Join(e.bundle, "site", "site.yaml")
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	return "", nil
}

// siteBootstrap is the part of the site firstboot needs before the site can
// be loaded in full (its passwords may be encrypted with the age identity
// on the data disk, which is not mounted yet).
type siteBootstrap struct {
	Bootstrap struct {
		DataDisk     string `yaml:"dataDisk"`
		Provisioning struct {
			Address string `yaml:"address"`
		} `yaml:"provisioning"`
	} `yaml:"bootstrap"`
}

func (e *env) siteBootstrap(ctx context.Context) (siteBootstrap, error) {
	var sb siteBootstrap
	p, err := e.sitePath(ctx)
	if err != nil || p == "" {
		return sb, err
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return sb, fmt.Errorf("reading site file: %w", err)
	}
	if err := yaml.Unmarshal(data, &sb); err != nil {
		return sb, fmt.Errorf("reading site file %s: %w (check it with firstboot validate)", p, err)
	}
	return sb, nil
}

func (e *env) siteDataDisk(ctx context.Context) (string, error) {
	sb, err := e.siteBootstrap(ctx)
	return sb.Bootstrap.DataDisk, err
}

// registryAddrs are the registry's listen addresses: loopback, and the
// site's provisioning address when this machine has it.
func (e *env) registryAddrs(ctx context.Context, log interface{ Warn(string, ...any) }) []string {
	addrs := []string{e.opts.registryAddr}
	sb, err := e.siteBootstrap(ctx)
	if err != nil || sb.Bootstrap.Provisioning.Address == "" {
		return addrs
	}
	ip, _, err := net.ParseCIDR(sb.Bootstrap.Provisioning.Address)
	if err != nil {
		return addrs
	}
	_, port, _ := net.SplitHostPort(e.opts.registryAddr)
	if !localIP(ip) {
		log.Warn("the provisioning address is not on any interface yet; the registry listens on loopback only",
			"address", ip.String())
		return addrs
	}
	return append(addrs, net.JoinHostPort(ip.String(), port))
}

func localIP(ip net.IP) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}

// restConfigFrom reads a kubeconfig; the steps pass the mode's
// (env.kubeconfig).
func restConfigFrom(path string) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return cfg, nil
}

// manifests applies the bundle's manifests (or, for a bare OCI layout in
// host mode, the ones built into firstboot) in order with server-side
// apply, waiting for each CRD to be established and, after each file, for
// the file's Deployments to be available. A Deployment whose images the
// bundle's registry lacks is left out (it could not start offline).
func (e *env) manifests(ctx context.Context, pc *pipeline.Context) error {
	if err := e.findBundle(ctx); err != nil {
		return err
	}
	var fsys fs.FS = manifests.FS
	names := manifests.Files()
	dir := filepath.Join(e.bundle, "manifests")
	if entries, err := os.ReadDir(dir); err == nil {
		fsys, names = os.DirFS(dir), nil
		for _, en := range entries {
			if !en.IsDir() && (strings.HasSuffix(en.Name(), ".yaml") || strings.HasSuffix(en.Name(), ".yml")) {
				names = append(names, en.Name())
			}
		}
		slices.Sort(names)
	} else if e.opts.mode == "appliance" {
		return fmt.Errorf("the bundle has no manifests folder %s: %w", dir, err)
	} else {
		pc.Log.Info("the bundle has no manifests folder; applying firstboot's own", "folder", dir)
	}
	cfg, err := restConfigFrom(e.kubeconfig())
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	a, err := render.NewApplier(cfg)
	if err != nil {
		return err
	}
	for _, n := range names {
		objs, err := render.ReadManifest(fsys, n)
		if err != nil {
			return err
		}
		// A Deployment whose images the bundle's registry lacks could only
		// sit in ImagePullBackOff offline (and make containerd try the
		// upstream registry): it is left out, as mkusb leaves its manifest
		// off a stick (manifests.ifImagesPresent).
		var apply []*unstructured.Unstructured
		var wait []appsv1.Deployment
		for _, o := range objs {
			if o.GetKind() != "Deployment" {
				apply = append(apply, o)
				continue
			}
			var d appsv1.Deployment
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d); err != nil {
				return fmt.Errorf("manifest %s: Deployment %s: %w", n, o.GetName(), err)
			}
			if missing := missingImages(d, e.hasImage); len(missing) > 0 {
				pc.Log.Warn("left out a Deployment whose images the bundle lacks", "manifest", n, "deployment", d.Namespace+"/"+d.Name, "images", missing)
				continue
			}
			apply, wait = append(apply, o), append(wait, d)
		}
		if err := a.Apply(ctx, apply); err != nil {
			return fmt.Errorf("manifest %s: %w", n, err)
		}
		for _, d := range wait {
			if err := waitAvailable(ctx, cs, d.Namespace, d.Name, e.opts.timeout); err != nil {
				return fmt.Errorf("manifest %s: %w", n, err)
			}
			pc.Log.Info("available", "deployment", d.Namespace+"/"+d.Name)
		}
		pc.Log.Info("applied", "manifest", n, "objects", len(apply))
	}
	return nil
}

func missingImages(d appsv1.Deployment, has func(ref string) bool) []string {
	var out []string
	spec := d.Spec.Template.Spec
	for _, c := range append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...) {
		if !has(c.Image) {
			out = append(out, c.Image)
		}
	}
	return out
}

func waitAvailable(ctx context.Context, cs kubernetes.Interface, ns, name string, timeout time.Duration) error {
	var last string
	err := waitFor(ctx, timeout, "Deployment "+ns+"/"+name, func() (bool, error) {
		d, err := cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		for _, c := range d.Status.Conditions {
			if c.Type == appsv1.DeploymentAvailable {
				last = c.Message
				if c.Status == "True" && d.Status.ObservedGeneration >= d.Generation {
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil && last != "" {
		return fmt.Errorf("%w (%s)", err, last)
	}
	return err
}

// site applies the site's objects and reports each host's state.
func (e *env) site(ctx context.Context, pc *pipeline.Context) error {
	p, err := e.sitePath(ctx)
	if err != nil {
		return err
	}
	if p == "" {
		pc.Log.Info("no site (no --site, none in the bundle); nothing to provision")
		return sitestep.WriteHosts(e.paths.hostsFile(), []sitestep.Host{})
	}
	images, err := bundledImages(e.bundle)
	if err != nil {
		return err
	}
	cfg, err := restConfigFrom(e.kubeconfig())
	if err != nil {
		return err
	}
	identity := e.opts.ageIdentity
	if identity == "" {
		identity = e.paths.ageIdentity()
	}
	hosts, err := sitestep.Apply(ctx, cfg, sitestep.Options{Site: p, Images: images, KeyDir: e.paths.sshKeyDir(),
		AgeIdentity: identity, Log: pc.Log})
	if err != nil {
		return err
	}
	if err := sitestep.WriteHosts(e.paths.hostsFile(), hosts); err != nil {
		return err
	}
	states, err := sitestep.Watch(ctx, cfg, 15*time.Second, pc.Log)
	if err != nil {
		return err
	}
	pending := 0
	for _, s := range states {
		if s.State == "" {
			pending++
		}
	}
	if pending > 0 {
		pc.Log.Info(fmt.Sprintf("%d of %d hosts have no provisioning state yet (the baremetal-operator sets it); firstboot status shows them", pending, len(states)))
	}
	return nil
}
