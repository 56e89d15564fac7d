package site

import (
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Schemes that speak Redfish over HTTP and take a +http or +https suffix.
var redfishSchemes = map[string]bool{
	"redfish": true, "redfish-virtualmedia": true, "idrac-redfish": true, "idrac-virtualmedia": true,
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
