package render

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"

	metal3 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	"github.com/metal3-io/baremetal-operator/pkg/hardwareutils/bmc"
	corev1 "k8s.io/api/core/v1"

	"github.com/bootstick/bootstick/internal/site"
	"github.com/bootstick/bootstick/internal/sshkeys"
)

// Check renders s as o asks, with a throwaway SSH key when o gives none
// (never written or applied), and checks the objects against the
// baremetal-operator's admission rules (CheckWebhook): what a site must
// pass before anything is made for it.
func Check(s *site.Site, o Options) error {
	if o.SSHKey == nil {
		key, err := sshkeys.Generate(nil)
		if err != nil {
			return err
		}
		o.SSHKey = key
	}
	objs, err := Render(s, o)
	if err != nil {
		return err
	}
	return CheckWebhook(objs)
}

// CheckWebhook holds every rendered BareMetalHost to the baremetal-
// operator's own admission rules for a new host, so that a site that
// validates is never refused when it is applied.
//
// Since v0.11 the operator's webhook lives in its own module's internal
// packages, which no other module can import. So the rules are written
// here, from the operator's validateHost at the version the stick deploys
// (v0.13.2), for every field bootstick renders; the BMC address is parsed
// by the operator's own parser (pkg/hardwareutils/bmc), which decides the
// Ironic driver. The messages name fields and BMC addresses, never Secret
// values.
func CheckWebhook(objs []Object) error {
	var errs []error
	for _, o := range objs {
		bmh, ok := o.(*metal3.BareMetalHost)
		if !ok {
			continue
		}
		if err := errors.Join(webhookRules(bmh)...); err != nil {
			errs = append(errs, fmt.Errorf("host %s: the baremetal-operator would refuse it: %w", bmh.Name, err))
		}
	}
	return errors.Join(errs...)
}

var (
	bmhNameChars = regexp.MustCompile(`[^A-Za-z0-9._-]`)
	// The forms of a UUID a DNS name can take (google/uuid, which the
	// operator parses names with, also takes braces and urn:uuid:).
	uuidName = regexp.MustCompile(`^(?i:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{32})$`)
)

// webhookRules is the operator's validateHost for a new host.
func webhookRules(h *metal3.BareMetalHost) []error {
	var errs []error
	s := &h.Spec
	var access bmc.AccessDetails
	if s.BMC.Address != "" {
		var err error
		if access, err = bmc.NewAccessDetails(s.BMC.Address, s.BMC.DisableCertificateVerification); err != nil {
			errs = append(errs, fmt.Errorf("spec.bmc.address: %w", err))
		}
	}
	for field, ref := range map[string]*corev1.SecretReference{"userData": s.UserData, "networkData": s.NetworkData, "metaData": s.MetaData} {
		if ref != nil && ref.Namespace != "" && ref.Namespace != h.Namespace {
			errs = append(errs, fmt.Errorf("spec.%s: cross-namespace Secret references are not allowed", field))
		}
	}
	if len(h.Annotations) > 0 || (s.RAID != nil && len(s.RAID.HardwareRAIDVolumes) > 0) {
		// The operator checks annotations and hardware RAID volumes
		// further. bootstick renders neither, so this is a guard for its
		// own code: it never passes what it does not check.
		errs = append(errs, errors.New("internal: the rendered BareMetalHost carries annotations or hardware RAID volumes, which bootstick does not check against the operator's rules"))
	}
	if s.RAID != nil && len(s.RAID.HardwareRAIDVolumes) > 0 && len(s.RAID.SoftwareRAIDVolumes) > 0 {
		errs = append(errs, errors.New("hardwareRAIDVolumes and softwareRAIDVolumes can not be set at the same time"))
	}
	if access != nil {
		if s.RAID != nil && len(s.RAID.HardwareRAIDVolumes) > 0 && access.RAIDInterface() == "no-raid" {
			errs = append(errs, fmt.Errorf("spec.raid: BMC driver %s does not support configuring RAID", access.Type()))
		}
		if s.Firmware != nil {
			if _, err := access.BuildBIOSSettings((*bmc.FirmwareConfig)(s.Firmware)); err != nil {
				errs = append(errs, fmt.Errorf("spec.firmware: %w", err))
			}
		}
		// Virtual media needs no MAC, unless inspection is off.
		if (access.NeedsMAC() || h.InspectionDisabled()) && s.BootMACAddress == "" {
			errs = append(errs, fmt.Errorf("spec.bootMACAddress: BMC driver %s requires a BootMACAddress value", access.Type()))
		}
		if s.BootMACAddress != "" {
			if _, err := net.ParseMAC(s.BootMACAddress); err != nil {
				errs = append(errs, fmt.Errorf("spec.bootMACAddress: %w", err))
			}
		}
		if s.BootMode == metal3.UEFISecureBoot && !access.SupportsSecureBoot() {
			errs = append(errs, fmt.Errorf("spec.bootMode: BMC driver %s does not support secure boot", access.Type()))
		}
	}
	if bmhNameChars.MatchString(h.Name) {
		errs = append(errs, errors.New("metadata.name: BareMetalHost resource name cannot contain characters other than [A-Za-z0-9._-]"))
	}
	if uuidName.MatchString(h.Name) {
		errs = append(errs, errors.New("metadata.name: BareMetalHost resource name cannot be a UUID"))
	}
	if d := s.RootDeviceHints; d != nil && d.DeviceName != "" {
		sub := strings.TrimPrefix(d.DeviceName, "/dev/")
		switch {
		case sub == d.DeviceName:
			errs = append(errs, fmt.Errorf("spec.rootDeviceHints.deviceName: must be a /dev/ path, not %q", d.DeviceName))
		case strings.Contains(strings.TrimPrefix(sub, "disk/by-path/"), "/"):
			errs = append(errs, fmt.Errorf("spec.rootDeviceHints.deviceName: must be a path in /dev/ or /dev/disk/by-path/, not %q", d.DeviceName))
		}
	}
	if s.Image != nil {
		if _, err := url.ParseRequestURI(s.Image.URL); err != nil {
			errs = append(errs, fmt.Errorf("spec.image.url: %s is invalid: %w", s.Image.URL, err))
		}
		if _, _, err := s.Image.GetChecksum(); err != nil {
			errs = append(errs, fmt.Errorf("spec.image.checksum: %w", err))
		}
	}
	if s.InspectionMode != "" && s.InspectionMode != metal3.InspectionModeDisabled && s.InspectionMode != metal3.InspectionModeAgent {
		errs = append(errs, fmt.Errorf("spec.inspectionMode: invalid value %s, allowed values are 'disabled' or 'agent'", s.InspectionMode))
	}
	if s.DisablePowerOff && !s.Online {
		errs = append(errs, errors.New("spec.disablePowerOff: node can't simultaneously have online set to false and have power off disabled"))
	}
	return errs
}
