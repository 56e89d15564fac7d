// Package firewall is the appliance's firewall: an nftables ruleset, in
// nftables' own language, loaded with nft(8). Every rule lives in one
// table of its own (inet bootstick), so the machine's other rules (kube-
// proxy's, a developer's own) are never touched, and loading the ruleset
// again replaces the table in one transaction.
//
// The provisioning interface accepts only what the site's hosts need of
// this machine: DHCP and TFTP (Ironic's dnsmasq), NTP (the site's clock),
// Ironic's API (the deploy ramdisk's lookup and heartbeats), Ironic's
// image server (iPXE scripts, the ramdisk, the OS images and the
// packages) and the registry (the hosts' images). The API server, the
// kubelet, etcd, sshd and anything else are refused there unless the site
// opens them (Optional). Nothing is forwarded from the provisioning
// network or into it, but what the site asks for: between the site's
// hosts (this machine is their DHCP router), the hosts' queries to the
// site's DNS servers, and this machine's pods' connections to the hosts
// and BMCs. Refusals are ICMP "administratively prohibited", so a client
// sees at once that a firewall refused it, not a missing service.
package firewall

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/bootstick/bootstick/internal/command"
)

// Table is the nftables table (family inet) that holds every rule.
const Table = "bootstick"

// Service is a port of this machine a network may reach.
type Service struct {
	Name  string
	Proto string // "tcp" or "udp"
	Port  int
}

// HostServices are what the site's hosts need of this machine.
var HostServices = []Service{
	{"DHCP (Ironic's dnsmasq)", "udp", 67},
	{"DHCPv6 (Ironic's dnsmasq, on an IPv6 provisioning network)", "udp", 547},
	{"TFTP (Ironic's dnsmasq: iPXE)", "udp", 69},
	{"NTP (the site's clock)", "udp", 123},
	{"the registry (the hosts' images)", "tcp", 5000},
	{"Ironic's image server (iPXE scripts, the deploy ramdisk, OS images, packages)", "tcp", 6180},
	{"Ironic's API (the deploy ramdisk's lookup and heartbeats)", "tcp", 6385},
}

// Optional are the services a site may open to the provisioning network
// besides (bootstrap.provisioning.open), by name.
var Optional = map[string]Service{
	"ssh":            {"sshd", "tcp", 22},
	"kubernetes-api": {"the API server", "tcp", 6443},
}

// OptionalNames are Optional's names, sorted.
func OptionalNames() []string {
	names := make([]string, 0, len(Optional))
	for n := range Optional {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Config is the ruleset's input, from the site.
type Config struct {
	// Provisioning is the provisioning network's interface.
	Provisioning string
	// Open are names of Optional the provisioning network may reach too.
	Open []string
	// PodCIDR is this machine's pod range: its pods (the BPA's SSH, the
	// baremetal-operator's BMC calls) reach into the provisioning network.
	PodCIDR netip.Prefix
	// Hosts are the site's hosts' static cluster addresses: this machine
	// is the router of a host that has no leg on another host's cluster
	// network, and routes between them, one way (the other answers
	// directly), so statelessly.
	Hosts []netip.Addr
	// DNS are the site's DNS servers, which DHCP hands to the hosts with
	// this machine as their router: the hosts' queries to them are
	// forwarded (the servers need a route back to the provisioning
	// network: nothing is translated).
	DNS []netip.Addr
}

// ifname is what Linux accepts as an interface name, and what needs no
// quoting beyond nft's double quotes.
var ifname = regexp.MustCompile(`^[A-Za-z0-9_.:@-]{1,15}$`)

// Render returns the ruleset, a file for `nft -f`.
func (c Config) Render() ([]byte, error) {
	if !ifname.MatchString(c.Provisioning) {
		return nil, fmt.Errorf("the provisioning interface %q is not an interface name", c.Provisioning)
	}
	if !c.PodCIDR.IsValid() {
		return nil, errors.New("no pod range: the pods' connections to the hosts could not be told apart")
	}
	services := slices.Clone(HostServices)
	for _, name := range c.Open {
		s, ok := Optional[name]
		if !ok {
			return nil, fmt.Errorf("%q cannot be opened to the provisioning network (it can open %s)", name, strings.Join(OptionalNames(), ", "))
		}
		services = append(services, s)
	}
	p := c.Provisioning
	var b bytes.Buffer
	fmt.Fprintf(&b, `# bootstick: the appliance's firewall (firstboot's firewall step, package
# internal/firewall). Loading it replaces the table in one transaction.
table inet %[1]s
delete table inet %[1]s
table inet %[1]s {
	chain input {
		type filter hook input priority filter; policy accept;
		iifname "%[2]s" jump provisioning
	}
	# What the provisioning network may reach on this machine.
	chain provisioning {
		ct state established,related accept
		ct state invalid drop
		meta l4proto { icmp, ipv6-icmp } accept
`, Table, p)
	for _, s := range services {
		fmt.Fprintf(&b, "\t\t%s dport %d accept comment %q\n", s.Proto, s.Port, s.Name)
	}
	fmt.Fprintf(&b, `		counter reject with icmpx admin-prohibited comment "everything else"
	}
	# Nothing is forwarded from the provisioning network or into it, but
	# between its own machines (a bridge), between the site's hosts (this
	# machine is their router), the hosts' DNS queries to the site's
	# servers, this machine's pods' connections to the hosts and BMCs,
	# and every allowed connection's answers.
	chain forward {
		type filter hook forward priority filter; policy accept;
		ct state established,related accept
		iifname "%[1]s" oifname "%[1]s" accept comment "within the provisioning network"
`, p)
	rule := func(format string, addrs []netip.Addr, args ...any) {
		for _, fam := range []struct {
			ip string
			is func(netip.Addr) bool
		}{{"ip", netip.Addr.Is4}, {"ip6", netip.Addr.Is6}} {
			var set []string
			for _, a := range addrs {
				if fam.is(a) {
					set = append(set, a.String())
				}
			}
			if len(set) > 0 {
				fmt.Fprintf(&b, "\t\t"+format+"\n", append([]any{fam.ip, strings.Join(set, ", ")}, args...)...)
			}
		}
	}
	rule(`iifname "%[3]s" %[1]s daddr { %[2]s } accept comment "to the site's hosts"`, c.Hosts, p)
	rule(`iifname "%[3]s" %[1]s daddr { %[2]s } meta l4proto { tcp, udp } th dport 53 accept comment "the site's DNS servers"`, c.DNS, p)
	fmt.Fprintf(&b, "\t\tiifname \"%s\" counter reject with icmpx admin-prohibited comment \"from the provisioning network\"\n", p)
	rule(`oifname "%[3]s" %[1]s saddr { %[2]s } accept comment "from the site's hosts"`, c.Hosts, p)
	fam := "ip"
	if c.PodCIDR.Addr().Is6() {
		fam = "ip6"
	}
	fmt.Fprintf(&b, "\t\toifname \"%s\" %s saddr %s accept comment \"this machine's pods\"\n", p, fam, c.PodCIDR.Masked())
	fmt.Fprintf(&b, "\t\toifname \"%s\" counter reject with icmpx admin-prohibited comment \"into the provisioning network\"\n", p)
	b.WriteString("\t}\n}\n")
	return b.Bytes(), nil
}

// Apply loads the ruleset file with nft.
func Apply(ctx context.Context, nft, file string) error {
	if _, err := command.Output(ctx, command.Options{}, nft, "-f", file); err != nil {
		return fmt.Errorf("loading the firewall %s: %w", file, err)
	}
	return nil
}

// Loaded reports whether the table is in the kernel; an error when nft
// cannot tell (not root, say).
func Loaded(ctx context.Context, nft string) (bool, error) {
	out, err := command.Output(ctx, command.Options{}, nft, "list", "table", "inet", Table)
	if err == nil {
		return len(out) > 0, nil
	}
	var ce *command.Error
	if errors.As(err, &ce) && strings.Contains(ce.Tail, "No such file or directory") {
		return false, nil
	}
	return false, fmt.Errorf("reading the firewall (nft list table inet %s): %w", Table, err)
}

// Remove deletes the table; no table is not an error.
func Remove(ctx context.Context, nft string) error {
	loaded, err := Loaded(ctx, nft)
	if err != nil || !loaded {
		return err
	}
	if _, err := command.Output(ctx, command.Options{}, nft, "delete", "table", "inet", Table); err != nil {
		return fmt.Errorf("removing the firewall (nft delete table inet %s): %w", Table, err)
	}
	return nil
}

// ErrNoNft is Find's error when nft is not installed.
var ErrNoNft = errors.New("nft is not installed (Debian package nftables)")

// Find returns nft's path: on PATH, else Debian's /usr/sbin (a
// developer's PATH may lack it).
func Find() (string, error) {
	if p, err := exec.LookPath("nft"); err == nil {
		return p, nil
	}
	if p, err := exec.LookPath("/usr/sbin/nft"); err == nil {
		return p, nil
	}
	return "", ErrNoNft
}
