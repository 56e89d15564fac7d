package sitestep

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	bpa "github.com/bootstick/bootstick/internal/bpa/v1alpha1"
	"github.com/bootstick/bootstick/internal/kube"
	"github.com/bootstick/bootstick/internal/render"
	"github.com/bootstick/bootstick/internal/site"
)

var provisioningResource = bpa.GroupVersion.WithResource("provisionings")

// CheckCluster says, as one error naming the site file and each field,
// what of s the running appliance behind c cannot take, judged by what
// the site step made there: another cluster.name than its Provisioning's
// (the hosts pruned are the cluster's), and a first master (by name) that
// is not a node of the application cluster already made (the BPA forms
// the cluster on the first master by name, and would make a second one
// there). Nothing when the site step made nothing yet.
func CheckCluster(ctx context.Context, c *kube.Client, s *site.Site, path string) error {
	provs, err := kube.List[bpa.Provisioning](ctx, c, provisioningResource, render.Namespace)
	if err != nil {
		return fmt.Errorf("reading the site's Provisioning: %w", err)
	}
	var problems []string
	for _, p := range provs {
		if p.Labels[render.LabelManagedBy] != "bootstick" {
			continue
		}
		if p.Name != s.Cluster.Name {
			problems = append(problems, fmt.Sprintf("cluster.name: %q, where this appliance's cluster is %q: site apply adds and removes the hosts of that cluster", s.Cluster.Name, p.Name))
			continue
		}
		var masters []string
		for _, h := range s.Hosts {
			if h.Role == site.RoleMaster {
				masters = append(masters, h.Name)
			}
		}
		if why := firstMasterProblem(masters, p.Status.Hosts); why != "" {
			problems = append(problems, why)
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("site %s:\n%w", path, errors.New(strings.Join(problems, "\n")))
	}
	return nil
}

// firstMasterProblem says why masters (the site's) cannot go to a
// Provisioning whose hosts are these: its first by name is not a node of
// the cluster its other hosts are nodes of. "" when there is no such
// cluster yet, or the first master is in it.
func firstMasterProblem(masters []string, hosts []bpa.HostStatus) string {
	if len(masters) == 0 {
		return "" // validation refuses a site with none
	}
	first := slices.Min(masters)
	var nodes []string
	for _, h := range hosts {
		if IsNode(h) {
			nodes = append(nodes, h.Name)
		}
	}
	if len(nodes) == 0 || slices.Contains(nodes, first) {
		return ""
	}
	slices.Sort(nodes)
	return fmt.Sprintf("hosts: master %s comes first by name, but is not a node of the application cluster (%s are): the BPA makes the cluster on the first master by name and would make a second one on %s; name a new master so that it sorts after the cluster's first master",
		first, strings.Join(nodes, ", "), first)
}

// IsNode reports whether the BPA made h a node (kubeadm init or join
// done).
func IsNode(h bpa.HostStatus) bool {
	return slices.ContainsFunc(h.Phases, func(p bpa.Phase) bool {
		return (p.Name == bpa.PhaseInit || p.Name == bpa.PhaseJoin) && p.Finished != nil
	})
}
