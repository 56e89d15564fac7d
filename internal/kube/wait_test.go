package kube

import (
	"context"
	"strings"
	"testing"
	"time"

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
}
