package render

import (
	"encoding/base64"
	"fmt"
	"io"
	"net/netip"
	"regexp"
	"strings"

	"golang.org/x/crypto/bcrypt"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bootstick/bootstick/internal/site"
)

// Where the Metal3 stack runs and the objects firstboot gives it (manifests
// 31-baremetal-operator.yaml and 32-ironic.yaml read them).
const (
	BMONamespace    = "baremetal-operator-system"
	IronicNamespace = "ironic"
	// BMOConfig is BMO's environment: where Ironic and the deploy
	// ramdisk are.
	BMOConfig = "ironic"
	// IronicConfig is Ironic's environment: the provisioning network.
	IronicConfig = "ironic-config"
	// IronicCredentials holds the user and password BMO talks to
	// Ironic with (files username and password, as BMO reads them).
	IronicCredentials = "ironic-credentials"
	// IronicHtpasswd holds the same user's bcrypt hash for Ironic.
	IronicHtpasswd = "ironic-htpasswd"
	// IronicTLS holds the certificate Ironic's API serves (tls.crt,
	// tls.key) and the CA that signed it (ca.crt).
	IronicTLS = "ironic-tls"
	// ProvisioningCA keeps the provisioning CA with its key, and Ironic's
	// certificate with its key (package ironictls): firstboot's own, to
	// issue the certificate again; no Pod mounts it.
	ProvisioningCA = "provisioning-ca"
	// IronicVMedia holds the secret path (path) under which alone the
	// ironic Pod's web server serves the virtual-media ISOs, each of
	// which carries its node's agent token; Ironic gives the BMC the URL.
	IronicVMedia = "ironic-vmedia"
	// BMOIronicCA holds the provisioning CA (ca.crt) that BMO verifies
	// Ironic's API against.
	BMOIronicCA = "ironic-ca"
	// IronicBMCCA holds the site's BMC CA certificates (bmc-ca.pem,
	// empty when the site gives none), which Ironic trusts beside the
	// system's roots when it speaks HTTPS to a Redfish BMC.
	IronicBMCCA = "ironic-bmc-ca"
	// IronicAPIPort is Ironic's API.
	IronicAPIPort = 6385
	// DeployRamdisk is the base name of the deploy kernel and initramfs
	// in os-images (NAME.kernel, NAME.initramfs).
	DeployRamdisk = "ironic-python-agent"
	// DeployRamdiskFolder is where Ironic's web server serves the deploy
	// ramdisk's initramfs that trusts the provisioning CA (the stick's
	// with the CA appended; firstboot's metal3 step writes it).
	DeployRamdiskFolder = "/deploy/"
	// IronicUser is the user BMO is to Ironic.
	IronicUser = "bootstick-bmo"
)

// IronicAuth is the credentials BMO and Ironic share. Password must never
// be logged; Htpasswd is its bcrypt hash.
type IronicAuth struct {
	Username, Password, Htpasswd string
}

// NewIronicAuth makes a random password for IronicUser.
func NewIronicAuth(rand io.Reader) (IronicAuth, error) {
	b := make([]byte, 24)
	if _, err := io.ReadFull(rand, b); err != nil {
		return IronicAuth{}, fmt.Errorf("making Ironic's password: %w", err)
	}
	pw := base64.RawURLEncoding.EncodeToString(b)
	return authFor(IronicUser, pw)
}

// IronicAuthFrom rebuilds the credentials from a stored password.
func IronicAuthFrom(username, password string) (IronicAuth, error) {
	return authFor(username, password)
}

func authFor(user, pw string) (IronicAuth, error) {
	h, err := bcrypt.GenerateFromPassword([]byte(pw), bcrypt.DefaultCost)
	if err != nil {
		return IronicAuth{}, fmt.Errorf("hashing Ironic's password: %w", err)
	}
	return IronicAuth{Username: user, Password: pw, Htpasswd: user + ":" + string(h) + "\n"}, nil
}

// NewVMediaPath makes a secret path for the virtual-media ISOs: 24
// random bytes, base64url (letters, digits, - and _).
func NewVMediaPath(rand io.Reader) (string, error) {
	b := make([]byte, 24)
	if _, err := io.ReadFull(rand, b); err != nil {
		return "", fmt.Errorf("making the virtual-media path: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// vmediaPath matches what NewVMediaPath makes (and what the Ironic
// image's scripts take).
var vmediaPath = regexp.MustCompile(`^[A-Za-z0-9_-]{32,}$`)

// IronicTLSFiles are the provisioning CA with its key and Ironic's
// certificate with its key, PEM (package ironictls makes them). The keys
// must never be logged.
type IronicTLSFiles struct {
	CA, CAKey, Cert, Key []byte
}

// ProvisioningIP is the bootstrap machine's address on the provisioning
// network (bootstrap.provisioning.address without its prefix).
func ProvisioningIP(p site.ProvisioningNetwork) (netip.Addr, error) {
	pfx, err := netip.ParsePrefix(p.Address)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("bootstrap.provisioning.address %q: %w", p.Address, err)
	}
	return pfx.Addr(), nil
}

// ramdiskKernelParams are the deploy ramdisk's kernel arguments besides
// the ones Ironic adds: its console on the serial port, as a server's
// serial-over-LAN shows it.
const ramdiskKernelParams = "console=ttyS0,115200n8"

// Metal3Inputs are what Ironic and BMO are configured from.
type Metal3Inputs struct {
	Provisioning site.ProvisioningNetwork
	Auth         IronicAuth
	// TLS is what Ironic's API serves and BMO verifies it with.
	TLS IronicTLSFiles
	// BMCCA is the PEM CA certificates the site's Redfish BMCs are signed
	// with (nil: the system's roots only).
	BMCCA []byte
	// DNS are the site's DNS servers (bootstrap.dns), which DHCP hands the
	// hosts (IPv4 addresses only). Without them dnsmasq names none.
	DNS []string
	// SiteClock says this machine serves NTP on its provisioning address
	// (firstboot's clock step), following the site's servers. DHCP then
	// names it as the hosts' NTP server, and the deploy ramdisk sets its
	// clock from it before it makes its TLS certificate: a server whose
	// hardware clock runs hours ahead would otherwise give Ironic a
	// certificate that is not yet valid. Without it the hosts keep their
	// own clocks.
	SiteClock bool
	// ProvisioningLimit is how many hosts BMO has Ironic work on at once
	// (bootstrap.provisioningLimit; BMO's own default when 0).
	ProvisioningLimit int
	// VMediaPath is the secret path of the virtual-media ISOs
	// (NewVMediaPath; kept from run to run). It must never be logged.
	VMediaPath string
}

// Metal3 renders the objects Ironic and BMO read their settings from: the
// provisioning network of the site (with which machines its DHCP
// answers), the credentials and the BMC CA.
func Metal3(in Metal3Inputs) ([]Object, error) {
	p, auth := in.Provisioning, in.Auth
	ip, err := ProvisioningIP(p)
	if err != nil {
		return nil, err
	}
	if len(in.TLS.CA) == 0 || len(in.TLS.CAKey) == 0 || len(in.TLS.Cert) == 0 || len(in.TLS.Key) == 0 {
		return nil, fmt.Errorf("Ironic's TLS certificate and the provisioning CA are missing: Ironic serves its API over TLS only")
	}
	if !vmediaPath.MatchString(in.VMediaPath) {
		return nil, fmt.Errorf("the virtual-media ISOs' secret path is missing or not 32 or more letters, digits, - and _ (NewVMediaPath makes one)")
	}
	http := fmt.Sprintf("http://%s:%d", hostPort(ip), ImagePort)
	meta := func(ns, name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{LabelManagedBy: "bootstick-firstboot"}}
	}
	cm := func(ns, name string, data map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: meta(ns, name), Data: data}
	}
	secret := func(ns, name string, data map[string]string) *corev1.Secret {
		return &corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}, ObjectMeta: meta(ns, name),
			Type: corev1.SecretTypeOpaque, StringData: data}
	}
	ironicEnv := map[string]string{
		"PROVISIONING_INTERFACE": p.Interface,
		"PROVISIONING_IP":        ip.String(),
		"DHCP_RANGE":             p.DHCPRange.Start + "," + p.DHCPRange.End,
		"HTTP_PORT":              fmt.Sprint(ImagePort),
		"IRONIC_API_PORT":        fmt.Sprint(IronicAPIPort),
		"IRONIC_KERNEL_PARAMS":   ramdiskKernelParams,
		// Which machines DHCP answers; the host list it reads is on the
		// data disk (package dhcphosts), where site apply changes it.
		"DHCP_HOSTS": p.DHCPHostsMode(),
	}
	// The site has no gateway on the provisioning network: DHCP_ROUTER is
	// left to run-dnsmasq's default, this machine.
	if dns := dhcpAddrs(in.DNS); dns != "" {
		ironicEnv["DHCP_DNS"] = dns
	}
	if in.SiteClock {
		ironicEnv["IRONIC_KERNEL_PARAMS"] += " ipa-ntp-server=" + ip.String()
		if ip.Is4() {
			ironicEnv["DHCP_NTP"] = ip.String()
		}
	}
	bmoEnv := map[string]string{
		"IRONIC_ENDPOINT":     fmt.Sprintf("https://%s:%d/v1/", hostPort(ip), IronicAPIPort),
		"IRONIC_CACERT_FILE":  BMOIronicCAFile,
		"DEPLOY_KERNEL_URL":   http + "/images/" + DeployRamdisk + ".kernel",
		"DEPLOY_RAMDISK_URL":  http + DeployRamdiskFolder + DeployRamdisk + ".initramfs",
		"DEPLOY_ARCHITECTURE": "x86_64",
	}
	if in.ProvisioningLimit > 0 {
		bmoEnv["PROVISIONING_LIMIT"] = fmt.Sprint(in.ProvisioningLimit)
	}
	return []Object{
		cm(BMONamespace, BMOConfig, bmoEnv),
		cm(IronicNamespace, IronicConfig, ironicEnv),
		secret(BMONamespace, IronicCredentials, map[string]string{"username": auth.Username, "password": auth.Password}),
		secret(IronicNamespace, IronicHtpasswd, map[string]string{"htpasswd": auth.Htpasswd}),
		cm(IronicNamespace, IronicBMCCA, map[string]string{"bmc-ca.pem": string(in.BMCCA)}),
		secret(IronicNamespace, IronicVMedia, map[string]string{"path": in.VMediaPath}),
		tlsSecret(meta(IronicNamespace, IronicTLS), map[string][]byte{
			corev1.TLSCertKey: in.TLS.Cert, corev1.TLSPrivateKeyKey: in.TLS.Key, "ca.crt": in.TLS.CA}),
		secret(IronicNamespace, ProvisioningCA, map[string]string{
			"ca.crt": string(in.TLS.CA), "ca.key": string(in.TLS.CAKey), "tls.crt": string(in.TLS.Cert), "tls.key": string(in.TLS.Key)}),
		cm(BMONamespace, BMOIronicCA, map[string]string{"ca.crt": string(in.TLS.CA)}),
	}, nil
}

// BMOIronicCAFile is where BMO reads the CA it verifies Ironic with
// (31-baremetal-operator.yaml mounts ConfigMap BMOIronicCA there).
const BMOIronicCAFile = "/opt/metal3/certs/ca/ca.crt"

// tlsSecret is a Secret of type kubernetes.io/tls.
func tlsSecret(meta metav1.ObjectMeta, data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}, ObjectMeta: meta,
		Type: corev1.SecretTypeTLS, Data: data}
}

// dhcpAddrs are the IPv4 addresses among servers, comma-separated, as
// dnsmasq's DHCPv4 options take them: a server named by DNS name (NTP may
// be) or by an IPv6 address cannot go in one.
func dhcpAddrs(servers []string) string {
	var out []string
	for _, s := range servers {
		if a, err := netip.ParseAddr(s); err == nil && a.Is4() {
			out = append(out, a.String())
		}
	}
	return strings.Join(out, ",")
}

// hostPort is an address as a URL's host: IPv6 in brackets.
func hostPort(ip netip.Addr) string {
	if ip.Is6() {
		return "[" + ip.String() + "]"
	}
	return ip.String()
}
