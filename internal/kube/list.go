package kube

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// List reads every object of the resource gvr in namespace (in every
// namespace when it is empty) as T, the resource's Go type, through the
// dynamic client: a kind needs no typed clientset to be read.
func List[T any](ctx context.Context, c *Client, gvr schema.GroupVersionResource, namespace string) ([]T, error) {
	list, err := c.dyn.Resource(gvr).Namespace(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", gvr.Resource, err)
	}
	out := make([]T, len(list.Items))
	for i, item := range list.Items {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(item.Object, &out[i]); err != nil {
			return nil, fmt.Errorf("reading %s %s: %w", gvr.Resource, item.GetName(), err)
		}
	}
	return out, nil
}
