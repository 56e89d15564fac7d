package site

import (
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/crypto/ssh"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/bootstick/bootstick/internal/firewall"
	"github.com/bootstick/bootstick/internal/netdata"
)

// Schemes that speak Redfish over HTTP and take a +http or +https suffix.
var redfishSchemes = map[string]bool{
	"redfish": true, "redfish-virtualmedia": true, "idrac-redfish": true, "idrac-virtualmedia": true,
}

var (
	// UEFISecureBoot by virtual media only: a PXE boot starts iPXE, which
	// is not signed, so Secure Boot firmware refuses it.
	bootModes      = []string{"UEFI", "UEFISecureBoot", "legacy"}
	checksumTypes  = []string{"md5", "sha256", "sha512", "auto"}
	diskFormats    = []string{"raw", "qcow2", "vdi", "vmdk", "live-iso"}
	roles          = []string{string(RoleMaster), string(RoleWorker)}
	dhcpHostsModes = []string{DHCPHostsSite, DHCPHostsAny}
	hexDigits      = regexp.MustCompile(`^[0-9a-fA-F]+$`)
	hctlPattern    = regexp.MustCompile(`^\d+:\d+:\d+:\d+$`)
	ifaceName      = regexp.MustCompile(`^[A-Za-z0-9_.:@-]{1,15}$`)
)

func (s *Site) validate(opts Options) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, s.Bootstrap.validate(field.NewPath("bootstrap"))...)
	errs = append(errs, s.validateBMCCA()...)
	nets, nerrs := s.hostNetworks()
	errs = append(errs, nerrs...)
	errs = append(errs, s.validateRanges(nets)...)
	errs = append(errs, s.validateHosts(opts)...)
	errs = append(errs, s.Cluster.validate(field.NewPath("cluster"), s.Bootstrap, opts.Plugins)...)
	errs = append(errs, s.validateVIP(nets, opts.NewCluster)...)
	for i, k := range s.SSHAuthorizedKeys {
		p := field.NewPath("sshAuthorizedKeys").Index(i)
		if strings.TrimSpace(k) == "" {
			errs = append(errs, field.Required(p, "an empty entry: fill it in or remove it"))
			continue
		}
		if strings.Contains(k, "PRIVATE KEY") {
			errs = append(errs, field.Invalid(p, field.OmitValueType{}, "this is a private key: remove it from the file and give its public half (the .pub file)"))
			continue
		}
		if _, _, _, rest, err := ssh.ParseAuthorizedKey([]byte(k)); err != nil || strings.TrimSpace(string(rest)) != "" {
			errs = append(errs, field.Invalid(p, field.OmitValueType{}, "not one SSH public key in authorized_keys format (ssh-ed25519 AAAA... comment)"))
		}
	}
	return errs
}

func (b *Bootstrap) validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	pp := p.Child("provisioning")
	prov := b.Provisioning
	errs = append(errs, validateIface(pp.Child("interface"), prov.Interface)...)
	prefix, perrs := hostPrefix(pp.Child("address"), prov.Address)
	errs = append(errs, perrs...)

	rp := pp.Child("dhcpRange")
	start, serr := parseAddr(rp.Child("start"), prov.DHCPRange.Start)
	end, eerr := parseAddr(rp.Child("end"), prov.DHCPRange.End)
	errs = append(errs, serr...)
	errs = append(errs, eerr...)
	if prefix.IsValid() {
		for _, e := range []struct {
			path  *field.Path
			value string
			addr  netip.Addr
		}{{rp.Child("start"), prov.DHCPRange.Start, start}, {rp.Child("end"), prov.DHCPRange.End, end}} {
			switch {
			case !e.addr.IsValid():
			case !prefix.Contains(e.addr):
				errs = append(errs, field.Invalid(e.path, e.value, "not inside the provisioning subnet "+prefix.Masked().String()))
			case reservedIn(prefix, e.addr) != "":
				errs = append(errs, field.Invalid(e.path, e.value, "is the subnet's "+reservedIn(prefix, e.addr)+" address, which no host can have: move the range inside"))
			}
		}
	}
	if start.IsValid() && end.IsValid() && start.BitLen() == end.BitLen() {
		if end.Less(start) {
			errs = append(errs, field.Invalid(rp.Child("end"), prov.DHCPRange.End, "comes before start "+prov.DHCPRange.Start))
		} else if a := prefix.Addr(); prefix.IsValid() && !a.Less(start) && !end.Less(a) {
			errs = append(errs, field.Invalid(rp, prov.DHCPRange.Start+"-"+prov.DHCPRange.End,
				fmt.Sprintf("covers the bootstrap address %s: start the range after it or end it before it", a)))
		}
	}

	if !contains(dhcpHostsModes, prov.DHCPHosts) {
		errs = append(errs, field.NotSupported(pp.Child("dhcpHosts"), prov.DHCPHosts, dhcpHostsModes))
	}
	seen := map[string]bool{}
	for i, name := range prov.Open {
		switch {
		case !contains(firewall.OptionalNames(), name):
			errs = append(errs, field.NotSupported(pp.Child("open").Index(i), name, firewall.OptionalNames()))
		case seen[name]:
			errs = append(errs, field.Duplicate(pp.Child("open").Index(i), name))
		}
		seen[name] = true
	}

	if ext := b.External; ext != nil {
		ep := p.Child("external")
		errs = append(errs, validateIface(ep.Child("interface"), ext.Interface)...)
		if ext.Interface != "" && ext.Interface == prov.Interface {
			errs = append(errs, field.Invalid(ep.Child("interface"), ext.Interface, "is the provisioning interface too: use another"))
		}
		eprefix, eerrs := hostPrefix(ep.Child("address"), ext.Address)
		errs = append(errs, eerrs...)
		if ext.Gateway != "" {
			gw, gerrs := parseAddr(ep.Child("gateway"), ext.Gateway)
			errs = append(errs, gerrs...)
			switch {
			case !gw.IsValid() || !eprefix.IsValid():
			case !eprefix.Contains(gw):
				errs = append(errs, field.Invalid(ep.Child("gateway"), ext.Gateway, "not inside the external subnet "+eprefix.Masked().String()))
			case gw == eprefix.Addr():
				errs = append(errs, field.Invalid(ep.Child("gateway"), ext.Gateway, "is this machine's own external address: give the router's"))
			case reservedIn(eprefix, gw) != "":
				errs = append(errs, field.Invalid(ep.Child("gateway"), ext.Gateway, "is the subnet's "+reservedIn(eprefix, gw)+" address: give the router's"))
			}
		}
		if eprefix.IsValid() && prefix.IsValid() && eprefix.Masked().Overlaps(prefix.Masked()) {
			errs = append(errs, field.Invalid(ep.Child("address"), ext.Address, "overlaps the provisioning subnet "+prefix.Masked().String()))
		}
	}

	dp := p.Child("dataDisk")
	switch {
	case b.DataDisk == "":
		errs = append(errs, field.Required(dp, "name the disk that keeps the cluster's state, e.g. /dev/disk/by-id/..."))
	case !strings.HasPrefix(b.DataDisk, "/dev/") || path.Clean(b.DataDisk) != b.DataDisk:
		errs = append(errs, field.Invalid(dp, b.DataDisk, "must be a device path under /dev/"))
	}
	for i, n := range b.NTP {
		if n == "" {
			errs = append(errs, field.Required(p.Child("ntp").Index(i), "an empty entry: fill it in or remove it"))
			continue
		}
		if _, err := netip.ParseAddr(n); err == nil {
			continue
		}
		if len(validation.IsDNS1123Subdomain(n)) > 0 {
			errs = append(errs, field.Invalid(p.Child("ntp").Index(i), n, "not an IP address or a DNS name"))
		}
	}
	for i, n := range b.DNS {
		if n == "" {
			errs = append(errs, field.Required(p.Child("dns").Index(i), "an empty entry: fill it in or remove it"))
			continue
		}
		if _, err := netip.ParseAddr(n); err != nil {
			errs = append(errs, field.Invalid(p.Child("dns").Index(i), n, "not an IP address"))
		}
	}
	if l := b.ProvisioningLimit; l < 0 || l > MaxProvisioningLimit {
		errs = append(errs, field.Invalid(p.Child("provisioningLimit"), l, fmt.Sprintf("give 1 to %d hosts at once, or leave it out for 20", MaxProvisioningLimit)))
	}
	return errs
}

// MaxProvisioningLimit bounds bootstrap.provisioningLimit: more hosts at
// once than one bootstrap machine serves.
const MaxProvisioningLimit = 100

func validateIface(p *field.Path, name string) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(p, "name the network interface, e.g. eno1")}
	}
	if !ifaceName.MatchString(name) {
		return field.ErrorList{field.Invalid(p, name, "not a network interface name (1-15 letters, digits, . _ - : @)")}
	}
	return nil
}

// hostPrefix parses an address with its prefix length, such as
// 172.22.0.1/24, that names a host inside its subnet.
func hostPrefix(p *field.Path, s string) (netip.Prefix, field.ErrorList) {
	if s == "" {
		return netip.Prefix{}, field.ErrorList{field.Required(p, "give the address with its prefix length, e.g. 172.22.0.1/24")}
	}
	pr, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, field.ErrorList{field.Invalid(p, s, "not an address with a prefix length, e.g. 172.22.0.1/24")}
	}
	if pr.Addr().Is4() && pr.Bits() < 31 {
		if pr.Addr() == pr.Masked().Addr() {
			return pr, field.ErrorList{field.Invalid(p, s, "is the subnet's network address: give the machine's own address")}
		}
		if pr.Addr() == netdata.LastAddr(pr) {
			return pr, field.ErrorList{field.Invalid(p, s, "is the subnet's broadcast address: give the machine's own address")}
		}
	}
	return pr, nil
}

// reservedIn names what a reserved address of an IPv4 subnet is
// ("network", "broadcast"), or "" for an address a host can have.
func reservedIn(pr netip.Prefix, a netip.Addr) string {
	if !a.Is4() || pr.Bits() >= 31 {
		return ""
	}
	switch a {
	case pr.Masked().Addr():
		return "network"
	case netdata.LastAddr(pr):
		return "broadcast"
	}
	return ""
}

func parseAddr(p *field.Path, s string) (netip.Addr, field.ErrorList) {
	if s == "" {
		return netip.Addr{}, field.ErrorList{field.Required(p, "give an IP address")}
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Addr{}, field.ErrorList{field.Invalid(p, s, "not an IP address")}
	}
	return a, nil
}

func (s *Site) validateHosts(opts Options) field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("hosts")
	if len(s.Hosts) == 0 {
		return field.ErrorList{field.Required(p, "list the hosts to provision, at least one master")}
	}
	names := map[string]bool{}
	macs := map[string]bool{}
	bmcs := map[string]string{} // endpoint -> the host that has it
	own := s.Bootstrap.ownAddresses()
	masters := 0
	var bundled map[string]bool
	if opts.BundledImages != nil {
		bundled = map[string]bool{}
		for _, im := range opts.BundledImages {
			bundled[im.Name] = true
		}
	}
	for i := range s.Hosts {
		h := &s.Hosts[i]
		hp := p.Index(i)
		np := hp.Child("name")
		switch {
		case h.Name == "":
			errs = append(errs, field.Required(np, "give the host a name (a DNS label such as master-0)"))
		case len(validation.IsDNS1123Label(h.Name)) > 0:
			errs = append(errs, field.Invalid(np, h.Name, "must be a DNS-1123 label: lower-case letters, digits and '-', at most 63, starting and ending with a letter or digit"))
		case names[h.Name]:
			errs = append(errs, field.Duplicate(np, h.Name))
		default:
			names[h.Name] = true
		}

		switch h.Role {
		case RoleMaster:
			masters++
		case RoleWorker:
		case "":
			errs = append(errs, field.Required(hp.Child("role"), "master or worker"))
		default:
			errs = append(errs, field.NotSupported(hp.Child("role"), string(h.Role), roles))
		}

		errs = append(errs, validateBMC(hp.Child("bmc"), &h.BMC)...)
		if ep, host := bmcEndpoint(h.BMC.Address); ep != "" {
			ap := hp.Child("bmc", "address")
			switch {
			case own[host]:
				errs = append(errs, field.Invalid(ap, RedactUserinfo(h.BMC.Address), "is the bootstrap machine's own address, not a host's BMC"))
			case bmcs[ep] != "":
				errs = append(errs, field.Invalid(ap, RedactUserinfo(h.BMC.Address), "is host "+bmcs[ep]+"'s BMC too: one BMC endpoint drives one host (a Redfish BMC of several systems takes a system path each)"))
			default:
				bmcs[ep] = h.Name
			}
		}

		mp := hp.Child("bootMACAddress")
		if h.BootMACAddress == "" {
			errs = append(errs, field.Required(mp, "give the MAC address of the NIC the host PXE-boots from"))
		} else if mac, err := NormalizeMAC(h.BootMACAddress); err != nil {
			errs = append(errs, field.Invalid(mp, h.BootMACAddress, err.Error()))
		} else if macs[mac] {
			errs = append(errs, field.Duplicate(mp, h.BootMACAddress))
		} else {
			macs[mac] = true
		}

		if !contains(bootModes, h.BootMode) {
			errs = append(errs, field.NotSupported(hp.Child("bootMode"), h.BootMode, bootModes))
		} else if h.BootMode == "legacy" && VirtualMedia(h.BMC.Address) {
			// The stick's Ironic builds virtual-media ISOs around an EFI
			// system partition only (no isolinux).
			errs = append(errs, field.Invalid(hp.Child("bootMode"), h.BootMode,
				"this stick boots hosts by virtual media in UEFI mode only: set bootMode UEFI, or boot the host by PXE (redfish:// or ipmi://)"))
		} else if h.BootMode == "UEFISecureBoot" && !VirtualMedia(h.BMC.Address) {
			// The virtual-media ISO boots Debian's signed shim, GRUB and
			// kernel; a PXE boot loads Debian's iPXE, which is unsigned.
			errs = append(errs, field.Invalid(hp.Child("bootMode"), h.BootMode,
				"Secure Boot firmware refuses the unsigned iPXE a PXE boot starts: boot the host by virtual media (redfish-virtualmedia:// or idrac-virtualmedia://), or set bootMode UEFI"))
		}
		if hints := h.RootDeviceHints; hints != nil {
			rp := hp.Child("rootDeviceHints")
			// The baremetal-operator takes /dev/NAME and /dev/disk/by-path/NAME
			// only (for other links, use the hints serialNumber, wwn, ...).
			if sub, ok := strings.CutPrefix(hints.DeviceName, "/dev/"); hints.DeviceName != "" &&
				(!ok || path.Clean(hints.DeviceName) != hints.DeviceName || strings.Contains(strings.TrimPrefix(sub, "disk/by-path/"), "/")) {
				errs = append(errs, field.Invalid(rp.Child("deviceName"), hints.DeviceName,
					"must be /dev/NAME or /dev/disk/by-path/NAME (for a disk by serial number or WWN, use serialNumber or wwn)"))
			}
			if hints.HCTL != "" && !hctlPattern.MatchString(hints.HCTL) {
				errs = append(errs, field.Invalid(rp.Child("hctl"), hints.HCTL, "must be Host:Channel:Target:Lun, e.g. 0:0:0:0"))
			}
			if hints.MinSizeGigabytes < 0 {
				errs = append(errs, field.Invalid(rp.Child("minSizeGigabytes"), hints.MinSizeGigabytes, "must not be negative"))
			}
		}
		errs = append(errs, validateImage(hp.Child("image"), &h.Image, bundled)...)

		rq := hp.Child("requirements")
		if h.Requirements.CPU < 0 {
			errs = append(errs, field.Invalid(rq.Child("cpu"), h.Requirements.CPU, "must not be negative"))
		}
		if m := h.Requirements.Memory; m != "" {
			if q, err := resource.ParseQuantity(m); err != nil || q.Sign() <= 0 {
				errs = append(errs, field.Invalid(rq.Child("memory"), m, "not a positive quantity such as 64Gi"))
			}
		}
		// The BPA's Provisioning carries sriov and qat for workers only:
		// a master's would be dropped, and the host never checked for it.
		if h.Role == RoleMaster && h.Requirements.SRIOV {
			errs = append(errs, field.Forbidden(rq.Child("sriov"), "a master is matched on cpu and memory only (the BPA's Provisioning carries sriov for workers): require SR-IOV of workers"))
		}
		if h.Role == RoleMaster && h.Requirements.QAT {
			errs = append(errs, field.Forbidden(rq.Child("qat"), "a master is matched on cpu and memory only (the BPA's Provisioning carries qat for workers): require QAT of workers"))
		}
	}
	if masters == 0 {
		errs = append(errs, field.Required(p, "at least one host needs role: master"))
	}

	// The DHCP range must have an address for every host.
	if start, err1 := netip.ParseAddr(s.Bootstrap.Provisioning.DHCPRange.Start); err1 == nil {
		if end, err2 := netip.ParseAddr(s.Bootstrap.Provisioning.DHCPRange.End); err2 == nil && start.BitLen() == end.BitLen() && !end.Less(start) {
			a, b := new(big.Int).SetBytes(start.AsSlice()), new(big.Int).SetBytes(end.AsSlice())
			size := new(big.Int).Sub(b, a)
			size.Add(size, big.NewInt(1))
			if size.Cmp(big.NewInt(int64(len(s.Hosts)))) < 0 {
				errs = append(errs, field.Invalid(field.NewPath("bootstrap", "provisioning", "dhcpRange"), s.Bootstrap.Provisioning.DHCPRange.Start+"-"+s.Bootstrap.Provisioning.DHCPRange.End,
					fmt.Sprintf("has %s addresses for %d hosts: widen it", size, len(s.Hosts))))
			}
		}
	}
	return errs
}

// NormalizeMAC returns a unicast Ethernet MAC address in lower case with
// colons.
func NormalizeMAC(s string) (string, error) {
	hw, err := net.ParseMAC(s)
	if err != nil || len(hw) != 6 {
		return "", fmt.Errorf("not a MAC address such as 52:54:00:12:34:56")
	}
	if hw[0]&1 == 1 {
		return "", fmt.Errorf("a multicast address cannot be a boot NIC's")
	}
	if hw.String() == "00:00:00:00:00:00" {
		return "", fmt.Errorf("the all-zero address cannot be a boot NIC's")
	}
	return hw.String(), nil
}

func validateBMC(p *field.Path, b *BMC) field.ErrorList {
	var errs field.ErrorList
	ap := p.Child("address")
	if b.Address == "" {
		errs = append(errs, field.Required(ap, "give the BMC URL, e.g. ipmi://10.0.0.5 or redfish://10.0.0.6/redfish/v1/Systems/1"))
	} else {
		errs = append(errs, validateBMCAddress(ap, b.Address)...)
	}
	cp := p.Child("credentials")
	if b.Credentials.unresolved {
		return errs
	}
	if b.Credentials.Username == "" {
		errs = append(errs, field.Required(cp.Child("username"), "give the BMC user name (inline or in credentials.file)"))
	}
	if b.Credentials.Password == "" && b.Credentials.EncryptedPassword == "" {
		errs = append(errs, field.Required(cp.Child("password"), "give the BMC password: password, encryptedPassword (age) or credentials.file"))
	}
	return errs
}

// bmcEndpoint is what a BMC address reaches: the host, the port (IPMI's
// 623 when none is given) and, for Redfish and the like, the system path;
// "" when the address does not parse. host is the address's host.
func bmcEndpoint(addr string) (endpoint, host string) {
	u, err := url.Parse(addr)
	if err != nil || u.Hostname() == "" {
		return "", ""
	}
	host = strings.ToLower(u.Hostname())
	if a, err := netip.ParseAddr(host); err == nil {
		host = a.Unmap().String()
	}
	scheme, _, _ := strings.Cut(u.Scheme, "+")
	port := u.Port()
	if port == "" && scheme == "ipmi" {
		port = "623"
	}
	path := strings.TrimRight(u.Path, "/")
	if scheme == "ipmi" {
		path = ""
	}
	return host + ":" + port + path, host
}

// ownAddresses are the bootstrap machine's own addresses.
func (b Bootstrap) ownAddresses() map[string]bool {
	out := map[string]bool{}
	for _, a := range []string{b.Provisioning.Address, externalAddress(b.External)} {
		if pr, err := netip.ParsePrefix(a); err == nil {
			out[pr.Addr().Unmap().String()] = true
		}
	}
	return out
}

func externalAddress(e *ExternalNetwork) string {
	if e == nil {
		return ""
	}
	return e.Address
}

// validateBMCAddress never echoes user info: a password may hide there.
func validateBMCAddress(p *field.Path, addr string) field.ErrorList {
	shown := RedactUserinfo(addr)
	u, err := url.Parse(addr)
	if err != nil {
		return field.ErrorList{field.Invalid(p, shown, "not a URL")}
	}
	if u.User != nil {
		return field.ErrorList{field.Invalid(p, shown, "must not carry a user or password: put them under credentials")}
	}
	scheme, transport, _ := strings.Cut(u.Scheme, "+")
	if why := StickIronic.Refuses(scheme); why != "" {
		if u.Scheme == "" || u.Host == "" && !strings.Contains(addr, "://") {
			return field.ErrorList{field.Invalid(p, shown, "give a scheme: one of "+strings.Join(BMCSchemes, ", ")+" (e.g. ipmi://10.0.0.5)")}
		}
		if why == "not a BMC scheme" {
			return field.ErrorList{field.NotSupported(p, u.Scheme, BMCSchemes)}
		}
		return field.ErrorList{field.Invalid(p, shown, fmt.Sprintf("scheme %s: %s; this stick drives %s", scheme, why, strings.Join(BMCSchemes, ", ")))}
	}
	var errs field.ErrorList
	if transport != "" && (!redfishSchemes[scheme] || transport != "http" && transport != "https") {
		errs = append(errs, field.Invalid(p, shown, fmt.Sprintf("scheme %q: only Redfish schemes take +http or +https", u.Scheme)))
	}
	host := u.Hostname()
	if host == "" {
		return append(errs, field.Invalid(p, shown, "has no host: e.g. "+scheme+"://10.0.0.5"))
	}
	if _, err := netip.ParseAddr(host); err != nil && len(validation.IsDNS1123Subdomain(strings.ToLower(host))) > 0 {
		errs = append(errs, field.Invalid(p, shown, fmt.Sprintf("host %q is not an IP address or a DNS name", host)))
	}
	if port := u.Port(); port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			errs = append(errs, field.Invalid(p, shown, "port must be 1-65535"))
		}
	} else if strings.HasSuffix(u.Host, ":") {
		errs = append(errs, field.Invalid(p, shown, "empty port"))
	}
	if scheme == "ipmi" && u.Path != "" && u.Path != "/" {
		errs = append(errs, field.Invalid(p, shown, "an ipmi address has no path"))
	}
	return errs
}

// RedactUserinfo replaces anything in a BMC address that may be a user or a
// password (everything between "://" and the last '@') with REDACTED.
func RedactUserinfo(addr string) string {
	rest := addr
	prefix := ""
	if i := strings.Index(addr, "://"); i >= 0 {
		prefix, rest = addr[:i+3], addr[i+3:]
	}
	// An operator may type a password with '/', '?' or '#' in it unescaped:
	// everything up to the last '@' may be user information.
	if k := strings.LastIndex(rest, "@"); k >= 0 {
		return prefix + "REDACTED@" + rest[k+1:]
	}
	return addr
}

func validateImage(p *field.Path, im *Image, bundled map[string]bool) field.ErrorList {
	var errs field.ErrorList
	switch {
	case im.URL == "" && im.Bundled == "":
		return field.ErrorList{field.Required(p, "give url and checksum, or bundled: the name of an image in the bundle")}
	case im.URL != "" && im.Bundled != "":
		return field.ErrorList{field.Forbidden(p.Child("bundled"), "give url or bundled, not both")}
	case im.Bundled != "":
		if im.Checksum != "" {
			errs = append(errs, field.Forbidden(p.Child("checksum"), "a bundled image's checksum comes from the bundle: remove it"))
		}
		if im.ChecksumType != "" {
			errs = append(errs, field.Forbidden(p.Child("checksumType"), "a bundled image's checksum comes from the bundle: remove it"))
		}
		if bundled != nil && !bundled[im.Bundled] {
			names := make([]string, 0, len(bundled))
			for n := range bundled {
				names = append(names, n)
			}
			errs = append(errs, field.NotSupported(p.Child("bundled"), im.Bundled, sortedStrings(names)))
		}
	default:
		u, err := url.Parse(im.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, field.Invalid(p.Child("url"), RedactUserinfo(im.URL), "must be an http:// or https:// URL"))
		}
		cp := p.Child("checksum")
		switch {
		case im.Checksum == "":
			errs = append(errs, field.Required(cp, "give the image's checksum (hex digest), or a URL of a checksum file with checksumType: auto"))
		case strings.HasPrefix(im.Checksum, "http://") || strings.HasPrefix(im.Checksum, "https://"):
			if im.ChecksumType == "" {
				errs = append(errs, field.Required(p.Child("checksumType"), "a checksum URL needs checksumType (md5, sha256, sha512 or auto)"))
			}
		case !hexDigits.MatchString(im.Checksum):
			errs = append(errs, field.Invalid(cp, im.Checksum, "not a hex digest or a checksum URL"))
		case im.ChecksumType == "":
			errs = append(errs, field.Invalid(cp, im.Checksum, fmt.Sprintf("%d hex digits fit no checksum type: md5 has 32, sha256 64, sha512 128", len(im.Checksum))))
		case im.ChecksumType != "auto" && len(im.Checksum) != map[string]int{"md5": 32, "sha256": 64, "sha512": 128}[im.ChecksumType]:
			errs = append(errs, field.Invalid(cp, im.Checksum, fmt.Sprintf("%d hex digits do not make a %s digest", len(im.Checksum), im.ChecksumType)))
		}
		if im.ChecksumType != "" && !contains(checksumTypes, im.ChecksumType) {
			errs = append(errs, field.NotSupported(p.Child("checksumType"), im.ChecksumType, checksumTypes))
		}
	}
	if im.Format != "" && !contains(diskFormats, im.Format) {
		errs = append(errs, field.NotSupported(p.Child("format"), im.Format, diskFormats))
	}
	return errs
}

func (c *Cluster) validate(p *field.Path, b Bootstrap, plugins []string) field.ErrorList {
	var errs field.ErrorList
	np := p.Child("name")
	if c.Name == "" {
		errs = append(errs, field.Required(np, "name the cluster (a DNS label)"))
	} else if len(validation.IsDNS1123Label(c.Name)) > 0 {
		errs = append(errs, field.Invalid(np, c.Name, "must be a DNS-1123 label: lower-case letters, digits and '-'"))
	}
	seen := map[string]bool{}
	for i, pl := range c.KUDPlugins {
		pp := p.Child("kudPlugins").Index(i)
		switch {
		case pl == "":
			errs = append(errs, field.Required(pp, "an empty entry: fill it in or remove it"))
		case len(validation.IsDNS1123Label(pl)) > 0:
			errs = append(errs, field.Invalid(pp, pl, "not a plugin name (a DNS label such as emco)"))
		case seen[pl]:
			errs = append(errs, field.Duplicate(pp, pl))
		case plugins != nil && !contains(plugins, pl):
			serves := "no KUD plugins"
			if len(plugins) > 0 {
				serves = "the KUD plugins " + strings.Join(plugins, ", ") + " only"
			}
			errs = append(errs, field.Invalid(pp, pl, "the stick serves "+serves+": remove it, or build a stick that carries it"))
		}
		seen[pl] = true
	}
	return errs
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func sortedStrings(s []string) []string {
	slices.Sort(s)
	return s
}
