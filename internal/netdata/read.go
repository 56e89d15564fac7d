package netdata

import (
	"fmt"
	"math"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// reader reads the untyped YAML of a networkData (maps, lists, strings,
// numbers), collecting every problem with its field path, and the
// addresses it names.
type reader struct {
	errs  field.ErrorList
	named []Address
	// defaults are where the host's default routes are, by family (true:
	// IPv6): a host has one of each.
	defaults map[bool]*field.Path
}

func (r *reader) add(e *field.Error) { r.errs = append(r.errs, e) }

// notFound refuses a reference to something that is not there, saying
// what to name instead.
func (r *reader) notFound(p *field.Path, v string, detail string) {
	e := field.NotFound(p, v)
	e.Detail = detail
	r.add(e)
}

// shown is a value as an error may show it: a scalar, not a whole list or
// mapping.
func shown(v any) any {
	switch v.(type) {
	case []any, map[string]any, map[any]any, nil:
		return field.OmitValueType{}
	}
	return v
}

// kindOf names what a YAML value is, for messages.
func kindOf(v any) string {
	switch v.(type) {
	case nil:
		return "nothing"
	case string:
		return "a string"
	case bool:
		return "true or false"
	case int, int64, uint64, float64:
		return "a number"
	case []any:
		return "a list"
	case map[string]any, map[any]any:
		return "a mapping"
	}
	return fmt.Sprintf("%T", v)
}

func (r *reader) mapping(p *field.Path, v any) (map[string]any, bool) {
	m, ok := v.(map[string]any)
	switch {
	case ok:
	case isMap(v):
		r.add(field.Invalid(p, field.OmitValueType{}, "every key of this mapping must be a name: quote the keys that are numbers or lists"))
	default:
		r.add(field.Invalid(p, field.OmitValueType{}, "must be a mapping, not "+kindOf(v)))
	}
	return m, ok
}

// isMap says whether v is a mapping whose keys are not all strings (YAML
// decodes it so).
func isMap(v any) bool {
	_, ok := v.(map[any]any)
	return ok
}

// list reads an optional list: nothing is an empty one.
func (r *reader) list(p *field.Path, v any) []any {
	if v == nil {
		return nil
	}
	l, ok := v.([]any)
	if !ok {
		r.add(field.Invalid(p, field.OmitValueType{}, "must be a list, not "+kindOf(v)))
	}
	return l
}

// str reads a string that must be there and not be empty.
func (r *reader) str(p *field.Path, v any, what string) (string, bool) {
	switch s := v.(type) {
	case nil:
		r.add(field.Required(p, "give "+what))
	case string:
		if s == "" {
			r.add(field.Required(p, "give "+what))
			return "", false
		}
		return s, true
	default:
		r.add(field.Invalid(p, shown(v), "must be a string, not "+kindOf(v)))
	}
	return "", false
}

// optStr reads a string that may be left out.
func (r *reader) optStr(p *field.Path, v any, what string) (string, bool) {
	if v == nil {
		return "", true
	}
	return r.str(p, v, what)
}

// integer reads a whole number in [lo, hi].
func (r *reader) integer(p *field.Path, v any, lo, hi int) (int, bool) {
	var n int
	switch x := v.(type) {
	case int:
		n = x
	case int64:
		n = int(x)
	case uint64:
		if x > math.MaxInt32 {
			r.add(field.Invalid(p, v, fmt.Sprintf("must be from %d to %d", lo, hi)))
			return 0, false
		}
		n = int(x)
	case float64:
		if x != math.Trunc(x) || math.Abs(x) > math.MaxInt32 {
			r.add(field.Invalid(p, v, fmt.Sprintf("must be a whole number from %d to %d", lo, hi)))
			return 0, false
		}
		n = int(x)
	default:
		r.add(field.Invalid(p, shown(v), fmt.Sprintf("must be a number from %d to %d, not %s", lo, hi, kindOf(v))))
		return 0, false
	}
	if n < lo || n > hi {
		r.add(field.Invalid(p, v, fmt.Sprintf("must be from %d to %d", lo, hi)))
		return 0, false
	}
	return n, true
}

// mtu reads an optional MTU: 68 (the least IPv4 takes) to 65535.
func (r *reader) mtu(p *field.Path, v any) int {
	if v == nil {
		return 0
	}
	n, _ := r.integer(p, v, 68, 65535)
	return n
}

func (r *reader) boolean(p *field.Path, v any) bool {
	b, ok := v.(bool)
	if !ok && v != nil {
		r.add(field.Invalid(p, shown(v), "must be true or false (yes and no are text here)"))
	}
	return b
}

// fields refuses every key of m that is not in allowed, saying what m is
// and what it takes; hints say more for keys a user may well write.
func (r *reader) fields(p *field.Path, m map[string]any, what string, hints map[string]string, allowed ...string) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if slices.Contains(allowed, k) {
			continue
		}
		if h, ok := hints[k]; ok {
			r.add(field.Forbidden(p.Child(k), h))
			continue
		}
		r.add(field.Forbidden(p.Child(k), fmt.Sprintf("%s takes only %s: remove it", what, strings.Join(allowed, ", "))))
	}
}

// mac reads a NIC's MAC address, in the canonical form (lower case, colons).
func (r *reader) mac(p *field.Path, v any) (string, bool) {
	s, ok := r.str(p, v, "a MAC address such as 52:54:00:12:34:56")
	if !ok {
		return "", false
	}
	hw, err := net.ParseMAC(s)
	switch {
	case err != nil || len(hw) != 6:
		r.add(field.Invalid(p, s, "not a MAC address such as 52:54:00:12:34:56"))
	case hw[0]&1 == 1:
		r.add(field.Invalid(p, s, "a multicast address is no NIC's: give the NIC's own MAC"))
	case hw.String() == "00:00:00:00:00:00":
		r.add(field.Invalid(p, s, "the all-zero address is no NIC's: give the NIC's own MAC"))
	default:
		return hw.String(), true
	}
	return "", false
}

// ip reads an IP address of one family (v6: IPv6).
func (r *reader) ip(p *field.Path, v any, v6 bool) (netip.Addr, bool) {
	want := "an IPv4 address"
	if v6 {
		want = "an IPv6 address"
	}
	s, ok := r.str(p, v, want)
	if !ok {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(s)
	switch {
	case err != nil || a.Zone() != "":
		r.add(field.Invalid(p, s, "not "+want))
	case a.Is4In6() || a.Is6() != v6:
		r.add(field.Invalid(p, s, "not "+want+": give one of the network's family"))
	default:
		return a, true
	}
	return netip.Addr{}, false
}

// anyIP reads an IP address of either family.
func (r *reader) anyIP(p *field.Path, v any) (netip.Addr, bool) {
	s, ok := r.str(p, v, "an IP address")
	if !ok {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" || a.Is4In6() {
		r.add(field.Invalid(p, s, "not an IP address"))
		return netip.Addr{}, false
	}
	return a, true
}

// hostAddr checks that an address with its prefix can be a host's own.
func (r *reader) hostAddr(p *field.Path, value string, pr netip.Prefix) bool {
	a := pr.Addr()
	switch {
	case a.IsUnspecified() || a.IsLoopback() || a.IsMulticast():
		r.add(field.Invalid(p, value, "is no host's address: give the host's own"))
	case a.Is4() && pr.Bits() == 32:
		// Ironic's schema takes no netmask 255.255.255.255.
		r.add(field.Invalid(p, value, "a /32 netmask is not one network_data.json takes: give the subnet's prefix length (/31 or shorter)"))
	case pr.Bits() == 0:
		r.add(field.Invalid(p, value, "has no prefix: give the subnet's prefix length"))
	case a.Is4() && pr.Bits() < 31 && a == pr.Masked().Addr():
		r.add(field.Invalid(p, value, "is the subnet's network address: give the host's own"))
	case a.Is4() && pr.Bits() < 31 && a == LastAddr(pr):
		r.add(field.Invalid(p, value, "is the subnet's broadcast address: give the host's own"))
	default:
		return true
	}
	return false
}

// LastAddr is the last address of a prefix (IPv4's broadcast address).
func LastAddr(pr netip.Prefix) netip.Addr {
	b := pr.Masked().Addr().AsSlice()
	for i := pr.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 1 << (7 - i%8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// gatewayOn checks that a route's gateway is reachable from the network
// it is on: inside its subnet, or an IPv6 link-local address.
func (r *reader) gatewayOn(p *field.Path, gw netip.Addr, subnet netip.Prefix) bool {
	if subnet.Contains(gw) || gw.Is6() && gw.IsLinkLocalUnicast() {
		if gw == subnet.Addr() {
			r.add(field.Invalid(p, gw.String(), "is the host's own address: give the router's"))
			return false
		}
		return true
	}
	r.add(field.Invalid(p, gw.String(), fmt.Sprintf("is outside the subnet %s it is reached on: give a router inside it", subnet.Masked())))
	return false
}

// defaultRoute notes a default route at p, refusing a second one of the
// same family: a host has one.
func (r *reader) defaultRoute(p *field.Path, v6 bool) {
	if r.defaults == nil {
		r.defaults = map[bool]*field.Path{}
	}
	if first := r.defaults[v6]; first != nil {
		family := "IPv4"
		if v6 {
			family = "IPv6"
		}
		r.add(field.Invalid(p, field.OmitValueType{}, fmt.Sprintf("a second default %s route (%s is one): give the host one", family, first)))
		return
	}
	r.defaults[v6] = p
}

func (r *reader) name(p *field.Path, kind Kind, a netip.Addr) {
	r.named = append(r.named, Address{Path: p, Kind: kind, Addr: a})
}

// maskBits reads a netmask in the form network_data.json has it (IPv4
// dotted, IPv6 in address form) as a prefix length; -1 when it is not one.
func maskBits(s string, v6 bool) int {
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" || a.Is4In6() || a.Is6() != v6 {
		return -1
	}
	ones, bits := net.IPMask(a.AsSlice()).Size()
	if bits == 0 {
		return -1 // not contiguous
	}
	return ones
}

// netmask writes a prefix length as network_data.json's netmask.
func netmask(bits int, v6 bool) string {
	size := 32
	if v6 {
		size = 128
	}
	a, _ := netip.AddrFromSlice(net.CIDRMask(bits, size))
	return a.String()
}

// linkID matches an id the deploy ramdisk can name an interface and its
// files by: a Linux interface name (at most 15 characters, no slash, no
// space).
var linkID = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,15}$`)

// checkLinkID refuses a link id (or netplan device name) that cannot be
// an interface's name.
func (r *reader) checkLinkID(p *field.Path, id string) bool {
	if id != "" && !linkID.MatchString(id) {
		r.add(field.Invalid(p, id, "must be an interface name: 1 to 15 letters, digits, '.', '_' or '-'"))
		return false
	}
	return true
}
