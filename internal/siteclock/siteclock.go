// Package siteclock makes the bootstrap machine the site's clock. A site
// often has no route to the internet, and its servers' clocks drift, or
// start hours off after a flat CMOS battery; Kubernetes certificates made
// "now" then fail on a host that lives in another hour. So the bootstrap
// machine runs chronyd: it follows the site's NTP servers when the site
// names any (bootstrap.ntp), stands as the site's clock when it names none
// or none answers, and serves the provisioning network, whose hosts take
// their time from it (DHCP's NTP option, and cloud-init's ntp module).
//
// Config renders chronyd's configuration; Query asks an NTP server for
// its time, as a host's client does.
package siteclock

import (
	"fmt"
	"net/netip"
	"strings"
)

// Config is what chronyd is told.
type Config struct {
	// Servers are the site's NTP servers (bootstrap.ntp), names or
	// addresses, in order.
	Servers []string
	// Listen is the address chronyd serves on (the provisioning address)
	// and Allow the network whose clients it answers.
	Listen netip.Addr
	Allow  netip.Prefix
	// PIDFile is chronyd's pid file: one of firstboot's own, so that a
	// chronyd of the machine's (a developer's host) is left alone.
	PIDFile string
	// SetClock lets chronyd set this machine's clock (the bootstrap
	// machine). Without it chronyd only serves the time this machine
	// keeps (developer mode: a developer's host keeps its own time
	// service, and chronyd runs with -x).
	SetClock bool
}

// Port is NTP's.
const Port = 123

// Addr is where chronyd answers: Listen, NTP's port.
func (c Config) Addr() netip.AddrPort { return netip.AddrPortFrom(c.Listen, Port) }

// Check reports what chronyd could not be told.
func (c Config) Check() error {
	switch {
	case !c.Listen.IsValid() || !c.Allow.IsValid() || !c.Allow.Contains(c.Listen):
		return fmt.Errorf("the site's clock: serving address %s is not in the network %s", c.Listen, c.Allow)
	case c.PIDFile == "" || strings.ContainsAny(c.PIDFile, " \t\n"):
		return fmt.Errorf("the site's clock: pid file %q", c.PIDFile)
	}
	for _, s := range c.Servers {
		if s == "" || strings.ContainsAny(s, " \t\n#") {
			return fmt.Errorf("the site's clock: NTP server %q is not a name or an address", s)
		}
	}
	return nil
}

// Render is chronyd's configuration file.
func (c Config) Render() ([]byte, error) {
	if err := c.Check(); err != nil {
		return nil, err
	}
	var b strings.Builder
	b.WriteString("# The site's clock: written by firstboot (its clock step) from the site.\n")
	if len(c.Servers) > 0 {
		b.WriteString("# The site's NTP servers (bootstrap.ntp).\n")
		for _, s := range c.Servers {
			fmt.Fprintf(&b, "server %s iburst\n", s)
		}
	}
	if c.SetClock {
		b.WriteString(`# A clock more than a second off is stepped, not slewed, in the first
# three updates: a server's clock may be hours off, and the certificates
# this machine makes must be valid on every host.
makestep 1 3
rtcsync
`)
	}
	b.WriteString(`# With no server named, or none answering, this machine's clock is the
# site's.
local stratum 10
`)
	fmt.Fprintf(&b, "# The provisioning network asks, and nothing else.\nbindaddress %s\nallow %s\n", c.Listen, c.Allow.Masked())
	fmt.Fprintf(&b, `# No command port or socket (chronyc): nothing else on this machine
# talks to it, and a chronyd of the machine's own keeps its.
cmdport 0
bindcmdaddress /
pidfile %s
`, c.PIDFile)
	return []byte(b.String()), nil
}
