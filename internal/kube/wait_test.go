package kube

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bootstick/bootstick/internal/kubetest"
)

// Against a real kube-apiserver: readiness is read with the cluster's CA,
// the control-plane taint goes and other taints stay, and a wait that
// cannot finish names what it waited for and why.
func TestReadyUntaintAndWaits(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real etcd and kube-apiserver from the toolchain")
	}
	env := kubetest.Start(t)
	if env.Config.Insecure || len(env.Config.CAData)+len(env.Config.CAFile) == 0 {
		t.Fatalf("the test cluster's config has no CA to check readiness with")
	}
	c, err := New(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if !c.Ready(ctx) {
		t.Fatal("Ready = false against a running API server")
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{
		{Key: ControlPlaneTaint, Effect: corev1.TaintEffectNoSchedule},
		{Key: "example.com/keep", Effect: corev1.TaintEffectNoSchedule},
	}}}
	if _, err := c.CS.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for range 2 { // twice: a node without the taint is left alone
		if err := c.Untaint(ctx); err != nil {
			t.Fatal(err)
		}
	}
	got, err := c.CS.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	for _, tn := range got.Spec.Taints {
		keys[tn.Key] = true
	}
	if keys[ControlPlaneTaint] || !keys["example.com/keep"] {
		t.Errorf("taints after Untaint: %+v, want example.com/keep and no control-plane taint", got.Spec.Taints)
	}
	err = c.WaitNodesReady(ctx, 300*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "not ready: [n1]") {
		t.Errorf("WaitNodesReady = %v, want it to name node n1", err)
	}
	err = c.WaitDeployment(ctx, "default", "nope", 300*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "Deployment default/nope") || !strings.Contains(err.Error(), "not found") {
		t.Errorf("WaitDeployment = %v, want it to name the missing Deployment", err)
	}
	checkNeverAvailable(t, c)
}

// checkNeverAvailable: a Deployment whose pod cannot get its image (as
// kubelet reports it in the pod's status) is named with the pod, the
// container, the image and the reason, long before the wait's timeout.
func checkNeverAvailable(t *testing.T, c *Client) {
	ctx := context.Background()
	labels := map[string]string{"app": "stuck"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "stuck", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/missing:v1"}}},
			},
		},
	}
	if _, err := c.CS.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// No controller manager runs here: the pod kubelet would run, with
	// the status kubelet gives it when the image cannot be pulled.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "stuck-1", Namespace: "default", Labels: labels}, Spec: dep.Spec.Template.Spec}
	pod, err := c.CS.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status.Phase = corev1.PodPending
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", Image: "registry.example/missing:v1", State: corev1.ContainerState{
		Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: `Back-off pulling image "registry.example/missing:v1"`}}}}
	if _, err := c.CS.CoreV1().Pods("default").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func(old time.Duration) { StuckAfter = old }(StuckAfter)
	StuckAfter = 0
	// A timeout the test would never wait out: the error must come from
	// the pod, not the clock.
	err = c.WaitDeployment(ctx, "default", "stuck", time.Hour)
	for _, want := range []string{"Deployment default/stuck can never become available", "pod stuck-1", "container app", "registry.example/missing:v1", "ImagePullBackOff"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("WaitDeployment = %v, want it to say %q", err, want)
		}
	}
}
