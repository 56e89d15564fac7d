package kube

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
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

// ListObjects reads the objects of the resource gvr in namespace whose
// labels match selector (a label selector: "a=b,c"; "" for all), as they
// are, managed fields and all.
func (c *Client) ListObjects(ctx context.Context, gvr schema.GroupVersionResource, namespace, selector string) ([]unstructured.Unstructured, error) {
	list, err := c.dyn.Resource(gvr).Namespace(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", gvr.Resource, err)
	}
	return list.Items, nil
}

// Delete deletes the object name of the resource gvr in namespace, only
// while it is still the object with uid (one made again under the same
// name is left alone). An object already gone is not an error. Finalizers
// run as usual: the object may stay, being deleted, after Delete returns.
func (c *Client) Delete(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string, uid types.UID) error {
	err := c.dyn.Resource(gvr).Namespace(namespace).Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting %s %s/%s: %w", gvr.Resource, namespace, name, err)
	}
	return nil
}
