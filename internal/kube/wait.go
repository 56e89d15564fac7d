package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
)

// poll is how often WaitReady asks the API server's /readyz.
const poll = 200 * time.Millisecond

// objectPoll is how often the waits on objects (nodes, Deployments and
// their pods) look. Each look is a GET and a LIST that the API server,
// etcd and this process all work on: on a bootstrap machine with two slow
// cores (a TCG guest in the tests), looks at 200 ms ran back to back: 440
// LISTs of pods by the twelfth minute of Journey B, while the pods waited
// for were starting on the same cores. A Deployment that becomes available
// is seen up to 2 s later.
const objectPoll = 2 * time.Second

// Ready reports whether the API server answers /readyz with ok, checked
// with the CA of the kubeconfig. A server that does not answer is not
// ready; that is no error.
func (c *Client) Ready(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	body, err := c.CS.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	return err == nil && string(body) == "ok"
}

// WaitReady waits up to timeout for Ready.
func (c *Client) WaitReady(ctx context.Context, timeout time.Duration) error {
	err := wait.PollUntilContextTimeout(ctx, poll, timeout, true, func(ctx context.Context) (bool, error) {
		return c.Ready(ctx), nil
	})
	if err != nil {
		return fmt.Errorf("the API server at %s is not ready after %s: %w", c.Config.Host, timeout, err)
	}
	return nil
}

// ControlPlaneTaint keeps ordinary pods off control-plane nodes.
const ControlPlaneTaint = "node-role.kubernetes.io/control-plane"

// Untaint removes the control-plane taint from every node, so that one
// node runs everything. A node without it is left alone.
func (c *Client) Untaint(ctx context.Context) error {
	nodes, err := c.CS.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing nodes: %w", err)
	}
	for _, n := range nodes.Items {
		keep := slices.DeleteFunc(slices.Clone(n.Spec.Taints), func(t corev1.Taint) bool { return t.Key == ControlPlaneTaint })
		if len(keep) == len(n.Spec.Taints) {
			continue
		}
		patch, err := jsonPatchTaints(n.ResourceVersion, keep)
		if err != nil {
			return err
		}
		if _, err := c.CS.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager}); err != nil {
			return fmt.Errorf("removing the control-plane taint from node %s: %w", n.Name, err)
		}
	}
	return nil
}

// NodeReady reports a node's Ready condition.
func NodeReady(n corev1.Node) bool {
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// PodReady reports a pod's Ready condition.
func PodReady(p corev1.Pod) bool {
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// until polls f until it says done or timeout passes; the error then
// names what was awaited and the last reason f gave.
func until(ctx context.Context, timeout time.Duration, what string, f func(ctx context.Context) (done bool, reason string)) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, objectPoll, timeout, true, func(ctx context.Context) (bool, error) {
		done, reason := f(ctx)
		last = reason
		return done, nil
	})
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
	}
	if last != "" {
		return fmt.Errorf("%s not ready after %s: %s", what, timeout, last)
	}
	return fmt.Errorf("%s not ready after %s", what, timeout)
}

// WaitNodesReady waits until there is a node and every node is Ready.
func (c *Client) WaitNodesReady(ctx context.Context, timeout time.Duration) error {
	return until(ctx, timeout, "the nodes", func(ctx context.Context) (bool, string) {
		nodes, err := c.CS.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		if len(nodes.Items) == 0 {
			return false, "no node has registered"
		}
		var notReady []string
		for _, n := range nodes.Items {
			if !NodeReady(n) {
				notReady = append(notReady, n.Name)
			}
		}
		return len(notReady) == 0, fmt.Sprintf("not ready: %v", notReady)
	})
}

// WaitDeployment waits until a Deployment is available and its latest
// generation rolled out. A Deployment whose pod cannot get its image is
// named with the pod and the reason once that has lasted StuckAfter,
// instead of after the whole timeout.
func (c *Client) WaitDeployment(ctx context.Context, ns, name string, timeout time.Duration) error {
	what := "Deployment " + ns + "/" + name
	var stuck error
	firstSeen := map[string]time.Time{}
	err := until(ctx, timeout, what, func(ctx context.Context) (bool, string) {
		d, err := c.CS.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		done, reason := deploymentDone(d)
		if done {
			return true, ""
		}
		if stuck = c.neverAvailable(ctx, d, firstSeen); stuck != nil {
			return true, ""
		}
		return false, reason
	})
	if err != nil {
		return err
	}
	if stuck != nil {
		return fmt.Errorf("%s can never become available: %w", what, stuck)
	}
	return nil
}

// StuckAfter is how long a pod of a Deployment may fail to get its image
// before the wait gives up on it. Nothing is pulled from outside the
// bundle, so such a pod never starts.
var StuckAfter = 30 * time.Second

// neverAvailable names a pod of d whose container has been unable to get
// its image (pull errors, an invalid name) for StuckAfter, as seen by
// this wait (firstSeen keeps when each was first seen failing).
func (c *Client) neverAvailable(ctx context.Context, d *appsv1.Deployment, firstSeen map[string]time.Time) error {
	if d.Spec.Selector == nil {
		return nil
	}
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return nil
	}
	pods, err := c.CS.CoreV1().Pods(d.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil
	}
	for _, p := range pods.Items {
		for _, cs := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
			w := cs.State.Waiting
			if w == nil || !imageFailure[w.Reason] {
				continue
			}
			key := p.Name + "/" + cs.Name
			first, ok := firstSeen[key]
			if !ok {
				firstSeen[key] = time.Now()
				continue
			}
			if time.Since(first) >= StuckAfter {
				return fmt.Errorf("pod %s: container %s (image %s): %s: %s", p.Name, cs.Name, cs.Image, w.Reason, w.Message)
			}
		}
	}
	return nil
}

// imageFailure are the waiting reasons of a container that cannot get its
// image.
var imageFailure = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true, "ErrImageNeverPull": true,
}

func deploymentDone(d *appsv1.Deployment) (bool, string) {
	if d.Status.ObservedGeneration < d.Generation {
		return false, "the controller has not seen the latest generation"
	}
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	for _, cond := range d.Status.Conditions {
		if cond.Type == appsv1.DeploymentAvailable && cond.Status != corev1.ConditionTrue {
			return false, cond.Message
		}
	}
	if d.Status.UpdatedReplicas < want || d.Status.AvailableReplicas < want {
		return false, fmt.Sprintf("%d of %d replicas updated, %d available", d.Status.UpdatedReplicas, want, d.Status.AvailableReplicas)
	}
	return true, ""
}

// WaitDaemonSet waits until a DaemonSet's pods are updated and available
// on every node it schedules to.
func (c *Client) WaitDaemonSet(ctx context.Context, ns, name string, timeout time.Duration) error {
	return until(ctx, timeout, "DaemonSet "+ns+"/"+name, func(ctx context.Context) (bool, string) {
		d, err := c.CS.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		s := d.Status
		if s.ObservedGeneration < d.Generation {
			return false, "the controller has not seen the latest generation"
		}
		if s.DesiredNumberScheduled == 0 || s.UpdatedNumberScheduled < s.DesiredNumberScheduled || s.NumberAvailable < s.DesiredNumberScheduled {
			return false, fmt.Sprintf("%d of %d pods updated, %d available", s.UpdatedNumberScheduled, s.DesiredNumberScheduled, s.NumberAvailable)
		}
		return true, ""
	})
}

// WaitPodsReady waits until every pod of the namespace that has not
// finished is Ready.
func (c *Client) WaitPodsReady(ctx context.Context, ns string, timeout time.Duration) error {
	return until(ctx, timeout, "the pods of "+ns, func(ctx context.Context) (bool, string) {
		notReady, err := c.PodsNotReady(ctx, ns)
		if err != nil {
			return false, err.Error()
		}
		return len(notReady) == 0, fmt.Sprintf("not ready: %v", notReady)
	})
}

// PodsNotReady lists "namespace/name (phase)" of every pod in ns (all
// namespaces when empty) that has not finished and is not Ready.
func (c *Client) PodsNotReady(ctx context.Context, ns string) ([]string, error) {
	pods, err := c.CS.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing pods: %w", err)
	}
	out := []string{}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodSucceeded || PodReady(p) {
			continue
		}
		out = append(out, fmt.Sprintf("%s/%s (%s)", p.Namespace, p.Name, p.Status.Phase))
	}
	return out, nil
}

// jsonPatchTaints is a merge patch that sets a node's taints, only if the
// node is still at resourceVersion rv.
func jsonPatchTaints(rv string, taints []corev1.Taint) ([]byte, error) {
	if taints == nil {
		taints = []corev1.Taint{}
	}
	return json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": rv}, "spec": map[string]any{"taints": taints}})
}

// Workload is a Deployment as people check it: ready or not, and how often
// its containers restarted.
type Workload struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Present is false when the Deployment does not exist (left out).
	Present  bool   `json:"present"`
	Ready    bool   `json:"ready"`
	Restarts int32  `json:"restarts"`
	Detail   string `json:"detail,omitempty"`
}

// DeploymentState reads a Deployment and its pods' restart counts.
func (c *Client) DeploymentState(ctx context.Context, ns, name string) (Workload, error) {
	w := Workload{Namespace: ns, Name: name}
	d, err := c.CS.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return w, nil
	}
	if err != nil {
		return w, fmt.Errorf("reading Deployment %s/%s: %w", ns, name, err)
	}
	w.Present = true
	w.Ready, w.Detail = deploymentDone(d)
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return w, fmt.Errorf("Deployment %s/%s: %w", ns, name, err)
	}
	pods, err := c.CS.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return w, fmt.Errorf("listing the pods of %s/%s: %w", ns, name, err)
	}
	for _, p := range pods.Items {
		for _, cs := range p.Status.ContainerStatuses {
			w.Restarts += cs.RestartCount
		}
	}
	return w, nil
}
