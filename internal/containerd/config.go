// Package containerd renders the configuration of containerd 1.6 (Debian
// bookworm's): the daemon's config.toml with the CRI plugin, and one
// hosts.toml per upstream registry that sends every pull to the bundle's
// registry, so images keep their original names and nothing else is
// contacted.
package containerd

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/template"
)

// Config is what config.toml says.
type Config struct {
	Root    string // persistent data (images, snapshots): on the data disk
	State   string // runtime state: under /run
	Address string // the gRPC socket; never the host's own containerd's
	// HostsDir is the registry config_path holding <registry>/hosts.toml.
	HostsDir     string
	SandboxImage string // the pause image, by its original name
	// RestrictOOMScoreAdj is needed where root lacks CAP_SYS_RESOURCE.
	RestrictOOMScoreAdj bool
	SystemdCgroup       bool
	CNIBinDir           string
	CNIConfDir          string
}

// Validate reports missing fields.
func (c Config) Validate() error {
	var missing []string
	for name, v := range map[string]string{"Root": c.Root, "State": c.State, "Address": c.Address,
		"HostsDir": c.HostsDir, "SandboxImage": c.SandboxImage, "CNIBinDir": c.CNIBinDir, "CNIConfDir": c.CNIConfDir} {
		if v == "" {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		return fmt.Errorf("containerd config: %s not set", strings.Join(missing, ", "))
	}
	for name, v := range map[string]string{"Root": c.Root, "State": c.State, "Address": c.Address, "HostsDir": c.HostsDir} {
		if !filepath.IsAbs(v) {
			return fmt.Errorf("containerd config: %s %q is not an absolute path", name, v)
		}
	}
	return nil
}

var configTmpl = template.Must(template.New("config.toml").Funcs(template.FuncMap{"q": strconv.Quote}).Parse(
	`# Written by firstboot. containerd 1.6, config version 2.
version = 2
root = {{q .Root}}
state = {{q .State}}

[grpc]
  address = {{q .Address}}

[ttrpc]
  address = ""

[debug]
  address = ""

[metrics]
  address = ""

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = {{q .SandboxImage}}
    restrict_oom_score_adj = {{.RestrictOOMScoreAdj}}
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = {{.SystemdCgroup}}
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = {{q .CNIBinDir}}
      conf_dir = {{q .CNIConfDir}}
    [plugins."io.containerd.grpc.v1.cri".registry]
      config_path = {{q .HostsDir}}
`))

// Render returns config.toml.
func Render(c Config) ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if err := configTmpl.Execute(&b, c); err != nil {
		return nil, fmt.Errorf("rendering containerd config: %w", err)
	}
	return b.Bytes(), nil
}

// HostsFiles returns, for every registry, the path of its hosts.toml
// relative to the hosts folder and its content. Each sends pulls and
// resolves to the mirrors (the bundle's registry, plain HTTP) and only to
// them: the first mirror is also the server, so there is no fallback to
// the upstream registry. containerd then asks the mirror with ?ns=<registry>.
func HostsFiles(registries []string, mirrors []string) (map[string][]byte, error) {
	if len(mirrors) == 0 {
		return nil, fmt.Errorf("hosts.toml: no mirror address")
	}
	for _, m := range mirrors {
		u, err := url.Parse(m)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
			return nil, fmt.Errorf("hosts.toml: mirror %q is not an http(s)://host:port URL", m)
		}
	}
	out := map[string][]byte{}
	for _, reg := range registries {
		if reg == "" || strings.ContainsAny(reg, "/\\ \"") || reg == "." || reg == ".." {
			return nil, fmt.Errorf("hosts.toml: registry name %q is not a host[:port]", reg)
		}
		var b bytes.Buffer
		fmt.Fprintf(&b, "# Written by firstboot: pulls of %s images go to the bundle's registry only.\n", reg)
		fmt.Fprintf(&b, "server = %s\n", strconv.Quote(mirrors[0]))
		// containerd 1.6 rejects a hosts.toml without a [host] table (and
		// then falls back to the upstream registry), so the mirrors are
		// listed as hosts as well as being the server.
		for _, m := range mirrors {
			fmt.Fprintf(&b, "\n[host.%s]\n  capabilities = [\"pull\", \"resolve\"]\n", strconv.Quote(m))
		}
		out[filepath.Join(reg, "hosts.toml")] = b.Bytes()
	}
	return out, nil
}

// capSysResource is CAP_SYS_RESOURCE's bit in the capability sets.
const capSysResource = 24

// NeedsRestrictOOMScoreAdj reports whether this process lacks
// CAP_SYS_RESOURCE in its effective set (read from /proc/self/status), in
// which case runc cannot set a negative oom_score_adj and containerd must
// restrict it.
func NeedsRestrictOOMScoreAdj() (bool, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return false, fmt.Errorf("reading capabilities: %w", err)
	}
	defer f.Close()
	return needsRestrict(f)
}

func needsRestrict(r io.Reader) (bool, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "CapEff:")
		if !ok {
			continue
		}
		caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		if err != nil {
			return false, fmt.Errorf("reading capabilities: CapEff %q: %w", strings.TrimSpace(v), err)
		}
		return caps&(1<<capSysResource) == 0, nil
	}
	if err := sc.Err(); err != nil {
		return false, fmt.Errorf("reading capabilities: %w", err)
	}
	return false, fmt.Errorf("reading capabilities: no CapEff line in /proc/self/status")
}
