package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/bootstick/bootstick/internal/bpa/install"
	bpa "github.com/bootstick/bootstick/internal/bpa/v1alpha1"
)

// KUDPackagesName is the ContainerPackages that a Provisioning's
// KUDPlugins map onto.
func KUDPackagesName(p *bpa.Provisioning) string { return p.Name + "-kud" }

// syncKUDPackages keeps the ContainerPackages KUDPackagesName(p) to p's
// KUDPlugins but the pod network (init installs it): made when they name
// another plugin, its list set to theirs (so a plugin taken out of
// KUDPlugins is removed from the cluster). It is the Provisioning's: one
// it did not make is not touched.
func (r *Reconciler) syncKUDPackages(ctx context.Context, p *bpa.Provisioning) error {
	var want []string
	for _, n := range p.Spec.KUDPlugins {
		if n != install.PluginFlannel && !slices.Contains(want, n) {
			want = append(want, n)
		}
	}
	name := types.NamespacedName{Namespace: p.Namespace, Name: KUDPackagesName(p)}
	var cp bpa.ContainerPackages
	err := r.Client.Get(ctx, name, &cp)
	switch {
	case apierrors.IsNotFound(err):
		if len(want) == 0 {
			return nil
		}
		cp = bpa.ContainerPackages{ObjectMeta: metav1.ObjectMeta{Namespace: name.Namespace, Name: name.Name, Labels: map[string]string{LabelKUDPluginsOf: p.Name}},
			Spec: bpa.ContainerPackagesSpec{Cluster: p.Name, Packages: want}}
		if err := r.Client.Create(ctx, &cp); err != nil {
			return fmt.Errorf("making container packages %s for the KUD plugins of provisioning %s: %w", name, p.Name, err)
		}
		r.event(ref(p), false, ReasonKUDPluginsMapped, "Install", fmt.Sprintf("KUD plugins %s: ContainerPackages %s installs them once the cluster is Ready", strings.Join(want, ", "), name.Name))
		return nil
	case err != nil:
		return fmt.Errorf("reading container packages %s: %w", name, err)
	case cp.Labels[LabelKUDPluginsOf] != p.Name || cp.Spec.Cluster != p.Name || slices.Equal(cp.Spec.Packages, want):
		return nil
	}
	cp.Spec.Packages = want
	if err := r.Client.Update(ctx, &cp); err != nil {
		return fmt.Errorf("updating container packages %s to the KUD plugins of provisioning %s: %w", name, p.Name, err)
	}
	return nil
}

// LabelKUDPluginsOf marks the ContainerPackages a Provisioning's
// KUDPlugins made, with the Provisioning's name.
const LabelKUDPluginsOf = "bpa.akraino.org/kud-plugins-of"
