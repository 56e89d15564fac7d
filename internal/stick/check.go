package stick

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/bootstick/bootstick/internal/bundle"
	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/completeness"
	"github.com/bootstick/bootstick/internal/kubeyaml"
	"github.com/bootstick/bootstick/internal/logctx"
	"github.com/bootstick/bootstick/internal/osimage"
	"github.com/bootstick/bootstick/internal/render"
	"github.com/bootstick/bootstick/internal/site"
	"github.com/bootstick/bootstick/internal/sshkeys"
)

func loadSite(ctx context.Context, path, identity string, allowCleartext bool, images []osimage.Image, plugins []string) (*site.Site, []string, error) {
	// The stick makes the site's cluster anew.
	opts := site.Options{BundledImages: images, Plugins: plugins, NewCluster: true}
	if identity != "" {
		ids, err := site.LoadIdentities(identity)
		if err != nil {
			return nil, nil, err
		}
		opts.Identities = ids
	}
	s, err := site.Load(path, opts)
	if err != nil {
		return nil, nil, err
	}
	var files []string
	if s.Bootstrap.BMCCAFile != "" {
		files = append(files, s.Bootstrap.BMCCAFile)
	}
	var clear []string
	for i, h := range s.Hosts {
		c := h.BMC.Credentials
		if c.File != "" {
			files = append(files, c.File)
		}
		if c.EncryptedPassword == "" {
			where := fmt.Sprintf("hosts[%d].bmc.credentials.password (host %s)", i, h.Name)
			if c.File != "" {
				where = fmt.Sprintf("%s: password (hosts[%d].bmc.credentials.file, host %s)", c.File, i, h.Name)
			}
			clear = append(clear, where)
			if allowCleartext {
				logctx.From(ctx).Warn("the stick will carry a BMC password in clear text (only root can read it there, but anyone holding the stick can): encrypt it with age (encryptedPassword)",
					"host", h.Name, "field", where)
			}
		}
	}
	if len(clear) > 0 && !allowCleartext {
		return nil, nil, fmt.Errorf("site %s: BMC passwords in clear text, which anyone holding the stick could read: %s. "+
			"Encrypt each with age (encryptedPassword: the output of age -a -r RECIPIENT, and --age-identity to build), "+
			"or build with --allow-cleartext to carry them as they are", path, strings.Join(clear, "; "))
	}
	sort.Strings(files)
	return s, files, nil
}

func checkComplete(ctx context.Context, o Options, b *bundle.Bundle, l *bundle.Lock, st *site.Site, siteImages []osimage.Image) error {
	in := completeness.Inputs{Manifests: map[string][]byte{}, KubernetesVersion: l.Kubernetes.Version}
	if st != nil {
		objs, err := siteObjects(st, siteImages)
		if err != nil {
			return err
		}
		in.SiteObjects = objs
	}
	for _, m := range l.Manifests {
		data, err := l.PinnedManifest(b, m)
		if err != nil {
			return err
		}
		in.Manifests[m.Name] = data
	}
	have := map[string]string{}
	for ref, im := range l.ImageRefs() {
		have[ref] = string(im.Digest)
		in.Registry = append(in.Registry, ref)
	}
	sort.Strings(in.Registry)
	in.KubeadmImages = o.KubeadmImages
	if in.KubeadmImages == nil {
		bin, cleanup, err := kubeadmBinary(o.Store, l)
		if err != nil {
			return err
		}
		defer cleanup()
		in.KubeadmImages = completeness.Kubeadm(bin)
	}
	uses, err := completeness.Collect(ctx, in)
	if err != nil {
		return err
	}
	if err := completeness.Check(uses, have); err != nil {
		return err
	}
	return checkDeployRamdisk(in.Manifests, l)
}

// siteObjects renders the site the way firstboot will, with a throwaway
// SSH key (keys name no image), for the completeness check.
func siteObjects(st *site.Site, images []osimage.Image) ([]map[string]any, error) {
	key, err := sshkeys.Generate(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("rendering the site: %w", err)
	}
	objs, err := render.Render(st, render.Options{SSHKey: key, Images: images})
	if err != nil {
		return nil, fmt.Errorf("rendering the site: %w", err)
	}
	us, err := render.Unstructured(objs)
	if err != nil {
		return nil, fmt.Errorf("rendering the site: %w", err)
	}
	out := make([]map[string]any, len(us))
	for i, u := range us {
		out[i] = u.Object
	}
	return out, nil
}

// checkDeployRamdisk fails when the stick ships the baremetal-operator but
// not the deploy kernel and initramfs it hands Ironic (firstboot points
// DEPLOY_KERNEL_URL and DEPLOY_RAMDISK_URL at /bundle/os-images).
func checkDeployRamdisk(manifests map[string][]byte, l *bundle.Lock) error {
	bmo := ""
	for name, data := range manifests {
		objs, err := kubeyaml.Decode(bytes.NewReader(data))
		if err != nil {
			return fmt.Errorf("manifests/%s: %w", name, err)
		}
		for _, o := range objs {
			if o.GetKind() == "Deployment" && o.GetName() == "baremetal-operator" {
				bmo = name
			}
		}
	}
	if bmo == "" {
		return nil
	}
	have := l.PayloadFiles()
	var missing []string
	for _, f := range []string{render.DeployRamdisk + ".kernel", render.DeployRamdisk + ".initramfs"} {
		if _, ok := have["os-images/"+f]; !ok {
			missing = append(missing, "os-images/"+f)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("manifests/%s runs the baremetal-operator, but the stick lacks the deploy ramdisk it boots hosts with: /bundle/%s\nadd the ironic-python-agent artifact to the recipes, or files with those names to the bundle",
			bmo, strings.Join(missing, ", /bundle/"))
	}
	return nil
}

// kubeadmBinary is an executable copy of the release's kubeadm.
func kubeadmBinary(store *cas.Store, l *bundle.Lock) (string, func(), error) {
	for _, f := range l.Kubernetes.Binaries {
		if f.Name != "kubeadm" {
			continue
		}
		dir, err := store.TempDir("kubeadm-")
		if err != nil {
			return "", nil, err
		}
		p := filepath.Join(dir, "kubeadm")
		if err := store.Link(f.SHA256, p); err != nil {
			os.RemoveAll(dir)
			return "", nil, err
		}
		if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 == 0 {
			// A downloaded blob is read-only and not executable: copy it.
			os.Remove(p)
			data, err := os.ReadFile(store.BlobPath(f.SHA256))
			if err == nil {
				err = os.WriteFile(p, data, 0o755)
			}
			if err != nil {
				os.RemoveAll(dir)
				return "", nil, err
			}
		}
		return p, func() { os.RemoveAll(dir) }, nil
	}
	return "", nil, errors.New("the Kubernetes release has no kubeadm binary: the completeness check needs it")
}
