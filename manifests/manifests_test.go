package manifests

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/bootstick/bootstick/internal/kubeadm"
)

func TestFilesParseInOrder(t *testing.T) {
	names := Files()
	want := []string{"00-namespaces.yaml", "10-crds-metal3.yaml", "11-crd-bpa.yaml", "20-rbac-baremetal-operator.yaml", "21-rbac-ironic.yaml", "22-rbac-bpa.yaml", "30-bpa.yaml", "31-baremetal-operator.yaml", "32-ironic.yaml"}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Fatalf("Files() = %v, want %v", names, want)
	}
	kinds := map[string]int{}
	for _, n := range names {
		data, err := fs.ReadFile(FS, n)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		for {
			var obj struct {
				APIVersion string `yaml:"apiVersion"`
				Kind       string `yaml:"kind"`
				Metadata   struct {
					Name string `yaml:"name"`
				} `yaml:"metadata"`
			}
			err := dec.Decode(&obj)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", n, err)
			}
			if obj.APIVersion == "" || obj.Kind == "" || obj.Metadata.Name == "" {
				t.Fatalf("%s: a document without apiVersion, kind or name: %+v", n, obj)
			}
			kinds[obj.Kind]++
		}
	}
	if kinds["CustomResourceDefinition"] != 13 || kinds["Namespace"] != 4 { // metal3 apis v0.13.2: 11 CRDs, and the BPA's two
		t.Fatalf("kinds = %v", kinds)
	}
}

// TestGeneratedUpToDate regenerates the CRDs with the pinned controller-gen
// and fails when the committed ones differ: run `make manifests`.
func TestGeneratedUpToDate(t *testing.T) {
	if testing.Short() {
		t.Skip("builds controller-gen (about a minute cold); run without -short")
	}
	out := t.TempDir()
	cmd := exec.Command("bash", "generate.sh")
	cmd.Env = append(os.Environ(), "OUT="+out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("generate.sh: %v\n%s", err, b)
	}
	for _, n := range []string{"10-crds-metal3.yaml", "11-crd-bpa.yaml"} {
		fresh, err := os.ReadFile(filepath.Join(out, n))
		if err != nil {
			t.Fatal(err)
		}
		committed, err := fs.ReadFile(FS, n)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(fresh, committed) {
			t.Errorf("manifests/%s is stale: run `make manifests` (bash manifests/generate.sh) and commit it", n)
		}
	}
}

// BMO and the BPA time their leader election as the appliance's
// controller manager does (kubeadm.LeaderElectionLeaseDuration): on one
// node, a slow API server must not restart them.
func TestLeaderElectionRidesOutASlowAPIServer(t *testing.T) {
	le := []time.Duration{kubeadm.LeaderElectionLeaseDuration, kubeadm.LeaderElectionRenewDeadline, kubeadm.LeaderElectionRetryPeriod}
	for file, want := range map[string][]string{
		"31-baremetal-operator.yaml": {"--enable-leader-election",
			fmt.Sprintf("--lease-duration-seconds=%d", int(le[0].Seconds())),
			fmt.Sprintf("--renew-deadline-seconds=%d", int(le[1].Seconds())),
			fmt.Sprintf("--retry-period-seconds=%d", int(le[2].Seconds()))},
		"30-bpa.yaml": {"--leader-elect", "--leader-elect-lease-duration=" + le[0].String(),
			"--leader-elect-renew-deadline=" + le[1].String(), "--leader-elect-retry-period=" + le[2].String()},
	} {
		var args []string
		for _, d := range deployments(t, file) {
			args = d.Spec.Template.Spec.Containers[0].Args
		}
		for _, w := range want {
			if !slices.Contains(args, w) {
				t.Errorf("%s: the Deployment's args %q lack %s", file, args, w)
			}
		}
	}
}

// No Pod of the appliance's is BestEffort: every container requests CPU
// and memory. A BestEffort Pod's cgroup has CPU weight 1 against the
// control plane's Burstable Pods, and on a busy bootstrap machine it
// waits behind them all (Ironic's API took minutes to answer in Journey
// B until it requested CPU).
func TestNoBestEffortPods(t *testing.T) {
	count := 0
	for _, n := range Files() {
		for _, d := range deployments(t, n) {
			count++
			for _, c := range d.Spec.Template.Spec.Containers {
				if c.Resources.Requests["cpu"] == "" || c.Resources.Requests["memory"] == "" {
					t.Errorf("%s: Deployment %s, container %s requests %v: want a CPU and a memory request", n, d.Metadata.Name, c.Name, c.Resources.Requests)
				}
			}
		}
	}
	if count != 3 {
		t.Errorf("checked %d Deployments, want 3 (the BPA, BMO and Ironic)", count)
	}
}

// deployment is what the tests read of a manifest's Deployment.
type deployment struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Spec struct {
		Template struct {
			Spec struct {
				Containers []struct {
					Name      string   `yaml:"name"`
					Args      []string `yaml:"args"`
					Resources struct {
						Requests map[string]string `yaml:"requests"`
					} `yaml:"resources"`
				} `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

// deployments are the Deployments of manifest file, in order.
func deployments(t *testing.T, file string) []deployment {
	t.Helper()
	data, err := fs.ReadFile(FS, file)
	if err != nil {
		t.Fatal(err)
	}
	var out []deployment
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var d deployment
		if err := dec.Decode(&d); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if d.Kind == "Deployment" {
			out = append(out, d)
		}
	}
}
