package vsite

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"strconv"
	"strings"
)

// xmlNode is an element of a libvirt domain's XML, kept whole so that a
// change to one part (the boot order) leaves the rest as libvirt wrote
// it. libvirt's domain XML has no mixed content: an element holds text or
// elements, never both, so text between elements (indentation) is dropped.
type xmlNode struct {
	XMLName xml.Name
	Attrs   []xml.Attr `xml:",any,attr"`
	Text    string     `xml:",chardata"`
	Nodes   []*xmlNode `xml:",any"`
}

func parseDomainXML(data []byte) (*xmlNode, error) {
	var n xmlNode
	if err := xml.Unmarshal(data, &n); err != nil {
		return nil, fmt.Errorf("domain xml: %w", err)
	}
	n.trim()
	return &n, nil
}

func (n *xmlNode) trim() {
	if len(n.Nodes) > 0 && strings.TrimSpace(n.Text) == "" {
		n.Text = ""
	}
	for _, c := range n.Nodes {
		c.trim()
	}
}

func (n *xmlNode) marshal() ([]byte, error) {
	var b bytes.Buffer
	enc := xml.NewEncoder(&b)
	enc.Indent("", "  ")
	if err := enc.Encode(n); err != nil {
		return nil, fmt.Errorf("domain xml: %w", err)
	}
	b.WriteByte('\n')
	return b.Bytes(), nil
}

func (n *xmlNode) attr(name string) string {
	for _, a := range n.Attrs {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

func (n *xmlNode) child(name string) *xmlNode {
	for _, c := range n.Nodes {
		if c.XMLName.Local == name {
			return c
		}
	}
	return nil
}

func (n *xmlNode) children(name string) []*xmlNode {
	var out []*xmlNode
	for _, c := range n.Nodes {
		if c.XMLName.Local == name {
			out = append(out, c)
		}
	}
	return out
}

func (n *xmlNode) removeChildren(name string) {
	kept := n.Nodes[:0]
	for _, c := range n.Nodes {
		if c.XMLName.Local != name {
			kept = append(kept, c)
		}
	}
	n.Nodes = kept
}

func (n *xmlNode) add(name string, attrs ...string) {
	c := &xmlNode{XMLName: xml.Name{Local: name}}
	for i := 0; i+1 < len(attrs); i += 2 {
		c.Attrs = append(c.Attrs, xml.Attr{Name: xml.Name{Local: attrs[i]}, Value: attrs[i+1]})
	}
	n.Nodes = append(n.Nodes, c)
}

// Redfish boot targets, and what each is in a domain: the device kind of
// <os><boot dev=…/> and the device that gets <boot order='1'/>.
const (
	bootPxe  = "Pxe"
	bootHdd  = "Hdd"
	bootCd   = "Cd"
	bootNone = "None"
)

var bootDevs = map[string]string{bootPxe: "network", bootHdd: "hd", bootCd: "cdrom"}

// bootDevice is the device element a boot target names: the first NIC
// (the boot NIC), the first disk, or the CD-ROM drive.
func (dom *xmlNode) bootDevice(target string) *xmlNode {
	devs := dom.child("devices")
	if devs == nil {
		return nil
	}
	switch target {
	case bootPxe:
		return devs.child("interface")
	case bootHdd, bootCd:
		want := map[string]string{bootHdd: "disk", bootCd: "cdrom"}[target]
		for _, d := range devs.children("disk") {
			if d.attr("device") == want {
				return d
			}
		}
	}
	return nil
}

// uefi tells whether the domain boots OVMF (it has a loader).
func (dom *xmlNode) uefi() bool {
	osEl := dom.child("os")
	return osEl != nil && osEl.child("loader") != nil
}

// secureBootCapable tells whether the domain's firmware is OVMF's Secure
// Boot build (its loader is secure).
func (dom *xmlNode) secureBootCapable() bool {
	osEl := dom.child("os")
	if osEl == nil || osEl.child("loader") == nil {
		return false
	}
	return osEl.child("loader").attr("secure") == "yes"
}

// nvram is the domain's variables file and the template it is made from
// ("" when the domain has none).
func (dom *xmlNode) nvram() (file, template string) {
	if osEl := dom.child("os"); osEl != nil {
		if n := osEl.child("nvram"); n != nil {
			return strings.TrimSpace(n.Text), n.attr("template")
		}
	}
	return "", ""
}

// setNVRAMTemplate names template as the one the domain's variables are
// made from.
func (dom *xmlNode) setNVRAMTemplate(template string) error {
	osEl := dom.child("os")
	if osEl == nil || osEl.child("nvram") == nil {
		return fmt.Errorf("the domain has no <nvram>")
	}
	n := osEl.child("nvram")
	for i, a := range n.Attrs {
		if a.Name.Local == "template" {
			n.Attrs[i].Value = template
			return nil
		}
	}
	n.Attrs = append(n.Attrs, xml.Attr{Name: xml.Name{Local: "template"}, Value: template})
	return nil
}

// setBootTarget makes target (Pxe, Hdd or Cd) the device the firmware
// tries first at the next power-on, with the disk after it, as
// sushy-tools' libvirt driver does: every earlier boot setting is
// removed. A BIOS machine gets <os><boot dev=…/> (what virtualbmc writes
// too); a UEFI machine gets per-device <boot order='N'/>, which OVMF
// honours (the two kinds cannot be mixed).
func (dom *xmlNode) setBootTarget(target string) error {
	osEl, devs := dom.child("os"), dom.child("devices")
	if osEl == nil || devs == nil {
		return fmt.Errorf("boot target %s: the domain has no <os> or <devices>", target)
	}
	if _, ok := bootDevs[target]; !ok {
		return fmt.Errorf("boot target %q is not one of Pxe, Hdd, Cd", target)
	}
	first := dom.bootDevice(target)
	if first == nil {
		return fmt.Errorf("boot target %s: the domain has no such device", target)
	}
	osEl.removeChildren("boot")
	for _, d := range devs.Nodes {
		d.removeChildren("boot")
	}
	order := []string{target}
	if target != bootHdd && dom.bootDevice(bootHdd) != nil {
		order = append(order, bootHdd)
	}
	for i, t := range order {
		if dom.uefi() {
			dom.bootDevice(t).add("boot", "order", strconv.Itoa(i+1))
		} else {
			osEl.add("boot", "dev", bootDevs[t])
		}
	}
	return nil
}

// bootTarget is the device the firmware tries first: the first
// <os><boot dev=…/>, else the device with the lowest boot order; None
// when neither is there.
func (dom *xmlNode) bootTarget() string {
	if osEl := dom.child("os"); osEl != nil {
		if b := osEl.child("boot"); b != nil {
			for t, dev := range bootDevs {
				if b.attr("dev") == dev {
					return t
				}
			}
		}
	}
	best, target := 0, bootNone
	devs := dom.child("devices")
	if devs == nil {
		return target
	}
	for _, d := range devs.Nodes {
		b := d.child("boot")
		if b == nil {
			continue
		}
		n, err := strconv.Atoi(b.attr("order"))
		if err != nil || (best != 0 && n >= best) {
			continue
		}
		t := ""
		switch {
		case d.XMLName.Local == "interface":
			t = bootPxe
		case d.XMLName.Local == "disk" && d.attr("device") == "disk":
			t = bootHdd
		case d.XMLName.Local == "disk" && d.attr("device") == "cdrom":
			t = bootCd
		}
		if t != "" {
			best, target = n, t
		}
	}
	return target
}

// cdrom is the domain's CD-ROM drive: its target (sdb, hdc) and the file
// in it ("" when empty).
func (dom *xmlNode) cdrom() (target, file string, err error) {
	d := dom.bootDevice(bootCd)
	if d == nil {
		return "", "", fmt.Errorf("the domain has no CD-ROM drive")
	}
	if t := d.child("target"); t != nil {
		target = t.attr("dev")
	}
	if src := d.child("source"); src != nil {
		file = src.attr("file")
	}
	if target == "" {
		return "", "", fmt.Errorf("the domain's CD-ROM drive has no target")
	}
	return target, file, nil
}

// macs are the domain's NICs' MAC addresses, in order (the boot NIC
// first).
func (dom *xmlNode) macs() []string {
	var out []string
	if devs := dom.child("devices"); devs != nil {
		for _, i := range devs.children("interface") {
			if m := i.child("mac"); m != nil {
				out = append(out, m.attr("address"))
			}
		}
	}
	return out
}

// text is the trimmed text of the child element name ("" when missing).
func (n *xmlNode) text(name string) string {
	if c := n.child(name); c != nil {
		return strings.TrimSpace(c.Text)
	}
	return ""
}
