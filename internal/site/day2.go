package site

import (
	"cmp"
	"fmt"
	"reflect"
	"slices"
	"strconv"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// FileRef is a file a site names besides itself.
type FileRef struct {
	// Field is where the site names it: hosts[1].bmc.credentials.file.
	Field string
	// Path is as written: relative to the site's folder, or absolute.
	Path string
}

// Files are the files the site names besides itself, in the file's order:
// bootstrap.bmcCAFile and each host's credentials file.
func (s *Site) Files() []FileRef {
	var out []FileRef
	if s.Bootstrap.BMCCAFile != "" {
		out = append(out, FileRef{Field: "bootstrap.bmcCAFile", Path: s.Bootstrap.BMCCAFile})
	}
	for i, h := range s.Hosts {
		if f := h.BMC.Credentials.File; f != "" {
			out = append(out, FileRef{Field: field.NewPath("hosts").Index(i).Child("bmc", "credentials", "file").String(), Path: f})
		}
	}
	return out
}

// FixedChanges lists, as "field.path: why", what next changes of the site
// a running appliance runs (running, as ReadEarly reads it) that it cannot
// take: `firstboot site apply` changes the hosts and the objects rendered
// for them and the cluster, but this machine's own settings (bootstrap,
// except provisioningLimit) were used by the steps before the site's, and
// the application cluster's name and ranges when it was made. Nothing it
// says is secret: neither part holds a credential.
func FixedChanges(running *Early, next *Site) []string {
	var out []string
	norm := func(b Bootstrap) any {
		b.ProvisioningLimit = 0 // paced by the site step: it may change
		b.PodCIDR = cmp.Or(b.PodCIDR, DefaultBootstrapPodCIDR)
		b.ServiceCIDR = cmp.Or(b.ServiceCIDR, DefaultBootstrapServiceCIDR)
		b.Provisioning.DHCPHosts = b.Provisioning.DHCPHostsMode()
		return plain(b)
	}
	diff("bootstrap", norm(running.Bootstrap), norm(next.Bootstrap), func(path string, was, is any) {
		out = append(out, fmt.Sprintf("%s: %s, where the running site has %s: site apply changes the hosts; this machine's own settings were set at its first boot (boot a stick with the new site to change them)",
			path, show(is), show(was)))
	})
	for _, c := range []struct {
		field, was, is, def string
	}{
		{"cluster.name", running.Cluster.Name, next.Cluster.Name, ""},
		{"cluster.podCIDR", running.Cluster.PodCIDR, next.Cluster.PodCIDR, DefaultPodCIDR},
		{"cluster.serviceCIDR", running.Cluster.ServiceCIDR, next.Cluster.ServiceCIDR, DefaultServiceCIDR},
		// kubeadm made it the controlPlaneEndpoint every node uses.
		{"cluster.controlPlaneVIP", running.Cluster.ControlPlaneVIP, next.Cluster.ControlPlaneVIP, ""},
	} {
		if was, is := cmp.Or(c.was, c.def), cmp.Or(c.is, c.def); was != is {
			out = append(out, fmt.Sprintf("%s: %q, where the running site has %q: the application cluster was made with it", c.field, is, was))
		}
	}
	return out
}

// plain is v as YAML's generic values (maps, lists, scalars), with its
// yaml names.
func plain(v any) any {
	data, err := yaml.Marshal(v)
	if err != nil {
		return fmt.Sprint(v) // not for these plain structs; compared as text
	}
	var out any
	if err := yaml.Unmarshal(data, &out); err != nil {
		return string(data)
	}
	return out
}

// diff calls report for each field path below path where a and b differ,
// in name order; lists compare whole.
func diff(path string, a, b any, report func(path string, was, is any)) {
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if !aok || !bok {
		if !reflect.DeepEqual(a, b) {
			report(path, a, b)
		}
		return
	}
	keys := make([]string, 0, len(am)+len(bm))
	for k := range am {
		keys = append(keys, k)
	}
	for k := range bm {
		if _, ok := am[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		diff(path+"."+k, am[k], bm[k], report)
	}
}

func show(v any) string {
	switch v := v.(type) {
	case nil:
		return "none"
	case string:
		return strconv.Quote(v)
	}
	data, err := yaml.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	var flow yaml.Node
	if yaml.Unmarshal(data, &flow) == nil && len(flow.Content) == 1 {
		flow.Content[0].Style = yaml.FlowStyle
		if out, err := yaml.Marshal(flow.Content[0]); err == nil {
			return string(out[:len(out)-1])
		}
	}
	return fmt.Sprint(v)
}
