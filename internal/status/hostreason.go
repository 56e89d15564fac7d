package status

import (
	"strings"
)

// HostReason says in words what went wrong with a host and what to do,
// from the baremetal-operator's error class and message (which carries
// Ironic's). The message itself follows, shortened.
func HostReason(errorType, message string) string {
	if errorType == "" && message == "" {
		return ""
	}
	m := strings.ToLower(message)
	has := func(words ...string) bool {
		for _, w := range words {
			if strings.Contains(m, w) {
				return true
			}
		}
		return false
	}
	var advice string
	switch {
	case certificateUntrusted(message):
		advice = "this machine does not trust the BMC's HTTPS certificate: give the CA that signed it (or the BMC's own certificate) in the site's bootstrap.bmcCAFile"
	case has("checksum"):
		advice = "the OS image's checksum does not match the image: check image.checksum in the site, or the image file"
	case has("unauthorized", "authentication", "rakp", "password", "invalid user", "insufficient privilege"):
		advice = "the BMC refused the user name or password: check the host's bmc.credentials in the site"
	case errorType == "registration error" || errorType == "provisioned registration error" || errorType == "power management error":
		advice = "the BMC does not answer, or refuses the credentials: check the host's bmc.address and bmc.credentials in the site, and that the BMC is reachable from this machine"
	case errorType == "inspection error" || has("inspection", "timeout reached while inspecting"):
		advice = "the host never reported back from the deploy ramdisk: check that its bootMACAddress is the NIC on the provisioning network and that it PXE-boots from that network (kubectl -n ironic logs deploy/ironic -c dnsmasq shows each DHCP request, and each MAC DHCP ignored)"
	case errorType == "provisioning error":
		advice = "writing the OS failed: see the message, check the image and the root device hints"
	case errorType == "preparation error":
		advice = "preparing the host (cleaning, RAID, BIOS settings) failed"
	default:
		advice = "see the message"
	}
	return reason(errorType, advice, message)
}

// BMCReason says what to do about a registration error once a probe
// without credentials has asked the BMC at address whether it is there.
func BMCReason(address string, answers bool, message string) string {
	if certificateUntrusted(message) {
		return HostReason("registration error", message)
	}
	advice := "nothing answers at " + address + ": check the host's bmc.address in the site, that the BMC is on and reachable from this machine, and that IPMI over LAN or Redfish is enabled"
	if answers {
		advice = "the BMC at " + address + " answers but refuses the user name or password: check the host's bmc.credentials in the site"
	}
	return reason("registration error", advice, message)
}

// certificateUntrusted says whether a message is TLS's (through requests
// and sushy) for a server certificate this machine does not trust.
func certificateUntrusted(message string) bool {
	m := strings.ToLower(message)
	return strings.Contains(m, "certificate verify failed") || strings.Contains(m, "certificate_verify_failed")
}

// reason is "type: advice (message)", the message on one line and cut
// short.
func reason(errorType, advice, message string) string {
	msg := strings.Join(strings.Fields(message), " ")
	if len(msg) > 240 {
		msg = msg[:240] + "…"
	}
	out := advice
	if errorType != "" {
		out = errorType + ": " + out
	}
	if msg != "" {
		out += " (" + msg + ")"
	}
	return out
}
