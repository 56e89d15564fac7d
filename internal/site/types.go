// Package site is the site file (kind: Site): the bootstrap machine's
// networks, every compute host with its BMC, boot and OS settings, and the
// cluster to build on them. Load reads it strictly, fills defaults, resolves
// credentials (inline, from a file, or age-encrypted) and validates it,
// reporting every problem with its line and field path.
package site

import (
	"github.com/bootstick/bootstick/internal/config"
)

// Kind is the kind of a site file.
const Kind = "Site"

// Site is a loaded, validated site file. Treat it as immutable.
type Site struct {
	config.TypeMeta `yaml:",inline"`
	Bootstrap       Bootstrap `yaml:"bootstrap"`
	Hosts           []Host    `yaml:"hosts"`
	Cluster         Cluster   `yaml:"cluster"`
	// SSHAuthorizedKeys are added, after the generated key, to every
	// host's user data.
	SSHAuthorizedKeys []string `yaml:"sshAuthorizedKeys,omitempty"`

	// Dir is the folder of the site file; relative paths start there.
	Dir string `yaml:"-"`
}

// Bootstrap is the machine that runs the appliance.
type Bootstrap struct {
	Provisioning ProvisioningNetwork `yaml:"provisioning"`
	External     *ExternalNetwork    `yaml:"external,omitempty"`
	// DataDisk is the block device that keeps etcd, kubelet, containerd
	// and firstboot state, e.g. /dev/disk/by-id/nvme-... or /dev/sdb.
	DataDisk string   `yaml:"dataDisk"`
	NTP      []string `yaml:"ntp,omitempty"`
	DNS      []string `yaml:"dns,omitempty"`
	// BMCCAFile names a PEM file (relative to the site file) of the CA
	// certificates that signed the Redfish BMCs' HTTPS certificates (or
	// the BMCs' own self-signed certificates). Ironic trusts them beside
	// the system's roots; the stick carries the file.
	BMCCAFile string `yaml:"bmcCAFile,omitempty"`
	// ProvisioningLimit is how many hosts Ironic inspects, deploys or
	// cleans at once (20 when unset). A small bootstrap machine, or a slow
	// provisioning network, serves fewer at a time. firstboot's site step
	// registers the hosts in waves of this size, every shape counted: the
	// others wait, paused, and start in the site's order as hosts are
	// provisioned or fail (sitestep.Pacer). Later work is held to it by
	// the baremetal-operator's PROVISIONING_LIMIT, which does not count
	// hosts booted by virtual media.
	ProvisioningLimit int `yaml:"provisioningLimit,omitempty"`
	// PodCIDR and ServiceCIDR are the bootstrap machine's own cluster's
	// ranges (10.244.0.0/16 and 10.96.0.0/12 by default).
	PodCIDR     string `yaml:"podCIDR,omitempty"`
	ServiceCIDR string `yaml:"serviceCIDR,omitempty"`
}

// ProvisioningNetwork is the network the hosts PXE-boot from.
type ProvisioningNetwork struct {
	Interface string `yaml:"interface"`
	// Address is the bootstrap machine's address with its prefix, e.g.
	// 172.22.0.1/24.
	Address   string    `yaml:"address"`
	DHCPRange DHCPRange `yaml:"dhcpRange"`
	// DHCPHosts says which machines the provisioning network's DHCP
	// server (Ironic's dnsmasq) answers. DHCPHostsSite (the default):
	// the boot NICs of the site's hosts only, every other MAC is ignored
	// and its DHCPDISCOVER logged as "ignored" (dnsmasq's log); a host
	// added or removed by `firstboot site apply` is answered or refused
	// from then on, without a restart. DHCPHostsAny: every MAC, for a site
	// that adds hosts with kubectl (BareMetalHosts without a site entry),
	// whose boot NICs the site cannot name. In both, a host that boots by
	// virtual media with a static address on its boot NIC is never
	// answered. Set at first boot: site apply cannot change it.
	DHCPHosts string `yaml:"dhcpHosts,omitempty"`
	// Open names services of this machine the provisioning network may
	// reach besides what the hosts need of it (DHCP, TFTP, NTP, Ironic's
	// API and image server, the registry), which is all it reaches
	// otherwise: "ssh" (sshd) and "kubernetes-api" (the API server), for
	// a site whose operators reach this machine on that network. The
	// kubelet and etcd are never opened (internal/firewall).
	Open []string `yaml:"open,omitempty"`
}

// The values of bootstrap.provisioning.dhcpHosts.
const (
	DHCPHostsSite = "site"
	DHCPHostsAny  = "any"
)

// DHCPHostsMode is DHCPHosts with its default, for a site read without
// defaults (ReadEarly).
func (p ProvisioningNetwork) DHCPHostsMode() string {
	if p.DHCPHosts == "" {
		return DHCPHostsSite
	}
	return p.DHCPHosts
}

// DHCPRange is an inclusive range of addresses handed out to hosts.
type DHCPRange struct {
	Start string `yaml:"start"`
	End   string `yaml:"end"`
}

// ExternalNetwork is the bootstrap machine's routed network.
type ExternalNetwork struct {
	Interface string `yaml:"interface"`
	Address   string `yaml:"address"`
	Gateway   string `yaml:"gateway,omitempty"`
}

// Role is a host's part in the cluster.
type Role string

// The roles a host can have.
const (
	RoleMaster Role = "master"
	RoleWorker Role = "worker"
)

// Host is one compute server.
type Host struct {
	Name            string           `yaml:"name"`
	Role            Role             `yaml:"role"`
	BMC             BMC              `yaml:"bmc"`
	BootMACAddress  string           `yaml:"bootMACAddress"`
	BootMode        string           `yaml:"bootMode,omitempty"`
	RootDeviceHints *RootDeviceHints `yaml:"rootDeviceHints,omitempty"`
	Image           Image            `yaml:"image"`
	// NetworkData is the host's network configuration: OpenStack's
	// network_data.json (links, networks, services) as YAML, or netplan's
	// version 2 (ethernets, bonds, vlans; NICs matched by macaddress),
	// which is converted to it (package netdata; Network gives the
	// model). The host's cloud-init (ConfigDrive) and a virtual-media
	// host's deploy ramdisk read it as network_data.json.
	NetworkData map[string]any `yaml:"networkData,omitempty"`
	// ClusterInterface names the link of NetworkData (a NIC, bond or
	// VLAN, by its id: the key of netplan's ethernets, bonds or vlans)
	// whose static IPv4 address is the host's in the application cluster:
	// kubelet's node IP, and flannel's interface. The bootstrap machine
	// must reach it: the BPA logs in there, and the API server of a
	// master answers there. Without it, the address on the network with
	// the default route, else the first static one, else the address DHCP
	// gave the host.
	ClusterInterface string       `yaml:"clusterInterface,omitempty"`
	Requirements     Requirements `yaml:"requirements,omitempty"`
}

// BMC is how the baremetal-operator reaches a host's management controller.
type BMC struct {
	// Address is a BMO BMC URL: ipmi://10.0.0.5:623,
	// redfish://10.0.0.6/redfish/v1/Systems/1, idrac-virtualmedia://...
	Address                        string      `yaml:"address"`
	Credentials                    Credentials `yaml:"credentials"`
	DisableCertificateVerification bool        `yaml:"disableCertificateVerification,omitempty"`
}

// Credentials are a BMC's user name and password: inline, age-encrypted
// inline, or in a file (relative to the site file) holding the same fields.
type Credentials struct {
	Username string `yaml:"username,omitempty"`
	Password Secret `yaml:"password,omitempty"`
	// EncryptedPassword is the password encrypted with age, ASCII-armored
	// (age -a -r RECIPIENT). Load decrypts it into Password.
	EncryptedPassword string `yaml:"encryptedPassword,omitempty"`
	// File names a YAML file with username and password (or
	// encryptedPassword), relative to the site file.
	File string `yaml:"file,omitempty"`

	// unresolved is set when File or EncryptedPassword could not be
	// read; its problem is already reported.
	unresolved bool
}

// RootDeviceHints select the disk the OS is written to (BMO's hints).
type RootDeviceHints struct {
	DeviceName         string `yaml:"deviceName,omitempty"`
	HCTL               string `yaml:"hctl,omitempty"`
	Model              string `yaml:"model,omitempty"`
	Vendor             string `yaml:"vendor,omitempty"`
	SerialNumber       string `yaml:"serialNumber,omitempty"`
	MinSizeGigabytes   int    `yaml:"minSizeGigabytes,omitempty"`
	WWN                string `yaml:"wwn,omitempty"`
	WWNWithExtension   string `yaml:"wwnWithExtension,omitempty"`
	WWNVendorExtension string `yaml:"wwnVendorExtension,omitempty"`
	Rotational         *bool  `yaml:"rotational,omitempty"`
}

// Image is the OS written to a host: by URL and checksum, or by the name of
// an image the bundle carries.
type Image struct {
	URL          string `yaml:"url,omitempty"`
	Checksum     string `yaml:"checksum,omitempty"`
	ChecksumType string `yaml:"checksumType,omitempty"`
	Format       string `yaml:"format,omitempty"`
	Bundled      string `yaml:"bundled,omitempty"`
}

// Requirements are what the BPA matches hosts on.
type Requirements struct {
	CPU    int32  `yaml:"cpu,omitempty"`
	Memory string `yaml:"memory,omitempty"`
	SRIOV  bool   `yaml:"sriov,omitempty"`
	QAT    bool   `yaml:"qat,omitempty"`
}

// Cluster is the Kubernetes cluster built on the hosts.
type Cluster struct {
	Name        string   `yaml:"name"`
	PodCIDR     string   `yaml:"podCIDR,omitempty"`
	ServiceCIDR string   `yaml:"serviceCIDR,omitempty"`
	KUDPlugins  []string `yaml:"kudPlugins,omitempty"`
	// ControlPlaneVIP is a free IPv4 address on the masters' network that
	// keepalived on the masters holds (VRRP) and kubeadm makes the
	// cluster's controlPlaneEndpoint: every node, flannel and the stored
	// kubeconfig reach the API there, so it outlives any one master. Set
	// it for three masters; without it the first master's address is the
	// endpoint. It cannot be added to a cluster that exists.
	ControlPlaneVIP string `yaml:"controlPlaneVIP,omitempty"`
}
