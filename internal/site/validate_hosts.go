package site

import (
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"net/url"
	"path"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

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
