package stick

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/bootstick/bootstick/internal/bundle"
	"github.com/bootstick/bootstick/internal/cas"
	"github.com/bootstick/bootstick/internal/payload"
	"github.com/bootstick/bootstick/internal/rootfs"
)

// layerRecord is the action record of the appliance layer.
type layerRecord struct {
	Layer cas.Digest `json:"layer"`
}

func (r *layerRecord) Blobs() []cas.Digest { return []cas.Digest{r.Layer} }

// layerBinaries are the release's binaries the appliance itself runs.
var layerBinaries = []string{"kubeadm", "kubelet", "kubectl"}

// buildLayer makes the appliance's squashfs (the overlay folder, firstboot
// and the Kubernetes binaries), cached by the hash of its inputs.
func buildLayer(ctx context.Context, o Options, l *bundle.Lock) (cas.Digest, error) {
	files := map[string]string{}
	inputs := map[string]any{"action": "layer/v1", "epoch": o.Epoch.Unix(), "level": l.OS.CompressionLevel}
	if o.Firstboot != "" {
		d, _, err := cas.HashFile(o.Firstboot)
		if err != nil {
			return "", fmt.Errorf("the firstboot binary: %w (build it: make bin/firstboot)", err)
		}
		inputs["firstboot"] = d
		files["/usr/local/bin/firstboot"] = o.Firstboot
	}
	for _, name := range layerBinaries {
		for _, f := range l.Kubernetes.Binaries {
			if f.Name == name {
				inputs["bin:"+name] = f.SHA256
				files["/usr/local/bin/"+name] = o.Store.BlobPath(f.SHA256)
			}
		}
	}
	if o.Overlay != "" {
		h, err := cas.HashTree(o.Overlay)
		if err != nil {
			return "", err
		}
		inputs["overlay"] = h
	}
	key, err := cas.Key(inputs)
	if err != nil {
		return "", err
	}
	rec := &layerRecord{}
	if ok, err := o.Store.GetAction(key, rec); err != nil {
		return "", err
	} else if ok {
		return rec.Layer, nil
	}
	work, err := o.Store.TempDir("layer-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	root := filepath.Join(work, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		return "", err
	}
	if err := rootfs.StageLayer(root, o.Overlay, files); err != nil {
		return "", err
	}
	// Blobs are read-only in the cache; the binaries must be executable.
	for p := range files {
		if err := os.Chmod(filepath.Join(root, p), 0o755); err != nil {
			return "", err
		}
	}
	out := filepath.Join(work, rootfs.LayerImage)
	if err := rootfs.Squash(ctx, root, out, rootfs.SquashOptions{Level: l.OS.CompressionLevel, Epoch: o.Epoch, AllRoot: true}); err != nil {
		return "", err
	}
	d, _, err := o.Store.PutFile(out)
	if err != nil {
		return "", err
	}
	rec.Layer = d
	return d, o.Store.PutAction(key, rec)
}

// stageTree lays out the ISO's tree: /live and /bundle.
func stageTree(ctx context.Context, o Options, b *bundle.Bundle, l *bundle.Lock, osr OSResult, layer cas.Digest, tree string, siteFiles []string, st *payload.Stats) error {
	live := filepath.Join(tree, "live")
	if err := os.MkdirAll(live, 0o755); err != nil {
		return err
	}
	info := BuildInfo{SourceDateEpoch: o.Epoch.Unix(), Live: map[string]cas.Digest{}}
	for _, f := range []struct{ src, name string }{
		{osr.Kernel, rootfs.KernelFile}, {osr.Initrd, rootfs.InitrdFile}, {osr.Squashfs, rootfs.BaseImage},
	} {
		dst := filepath.Join(live, f.name)
		if err := linkOrCopy(f.src, dst); err != nil {
			return fmt.Errorf("staging live/%s: %w", f.name, err)
		}
		d, _, err := cas.HashFile(dst)
		if err != nil {
			return err
		}
		info.Live["live/"+f.name] = d
	}
	if err := o.Store.Verify(layer); err != nil {
		return err
	}
	if err := o.Store.Link(layer, filepath.Join(live, rootfs.LayerImage)); err != nil {
		return err
	}
	info.Live["live/"+rootfs.LayerImage] = layer
	stats, err := payload.Stage(ctx, payload.Options{Store: o.Store, Lock: l, Bundle: b, Site: o.Site, SiteFiles: siteFiles,
		Dir: filepath.Join(tree, "bundle")})
	if err != nil {
		return err
	}
	*st = stats
	if o.Site != "" {
		d, _, err := cas.HashFile(o.Site)
		if err != nil {
			return err
		}
		info.Site = d
	}
	data, _ := json.MarshalIndent(info, "", "  ")
	return os.WriteFile(filepath.Join(tree, "bundle", "build.json"), append(data, '\n'), 0o644)
}

func linkOrCopy(src, dst string) error {
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
