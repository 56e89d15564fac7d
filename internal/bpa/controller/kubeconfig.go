package controller

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	bpa "github.com/bootstick/bootstick/internal/bpa/v1alpha1"
)

// ClusterLabel names, on the kubeconfig Secret, the cluster it opens.
const ClusterLabel = "cluster"

// KubeconfigKey is the kubeconfig Secret's key holding the kubeconfig.
const KubeconfigKey = "value"

// release drops every ownerReference of s to a Provisioning (p or one
// that had its name before), so that the garbage collector never deletes
// s with it: the admin kubeconfig outlives the object that asked for the
// cluster, as the cluster does. It reports whether s changed.
func release(s *corev1.Secret, p *bpa.Provisioning) bool {
	n := len(s.OwnerReferences)
	s.OwnerReferences = slices.DeleteFunc(s.OwnerReferences, func(o metav1.OwnerReference) bool {
		gv, err := schema.ParseGroupVersion(o.APIVersion)
		return o.UID == p.UID || (err == nil && gv.Group == bpa.GroupVersion.Group && o.Kind == "Provisioning")
	})
	if len(s.OwnerReferences) == 0 {
		s.OwnerReferences = nil
	}
	return len(s.OwnerReferences) != n
}

// kubeconfigSecrets names the Secrets that may hold p's admin
// kubeconfig: the one its status names and the one its cluster's name
// gives (they differ only if the cluster label changed).
func kubeconfigSecrets(p *bpa.Provisioning) []string {
	out := []string{KubeconfigSecretName(clusterName(p))}
	if s := p.Status.KubeconfigSecret; s != "" && s != out[0] {
		out = append(out, s)
	}
	return out
}
