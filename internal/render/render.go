// Package render turns a site into the Kubernetes objects that provision
// it: per host a BMC credentials Secret, a user-data Secret carrying the
// SSH public keys, a network-data Secret when the site gives one and a
// metal3.io BareMetalHost; then one bpa.akraino.org Provisioning for the
// cluster and the Secret holding the generated SSH key pair. Output is
// deterministic: hosts in name order, every map sorted on output.
package render

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	metal3 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/bootstick/bootstick/internal/bpa/install"
	bpa "github.com/bootstick/bootstick/internal/bpa/v1alpha1"
	"github.com/bootstick/bootstick/internal/osimage"
	"github.com/bootstick/bootstick/internal/site"
	"github.com/bootstick/bootstick/internal/sshkeys"
	"github.com/bootstick/bootstick/internal/userdata"
)

// Namespace holds every site object.
const Namespace = "metal3"

// SSHKeySecret is the name of the Secret with the generated key pair.
const SSHKeySecret = "bootstick-ssh-key"

// Labels put on every object.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	LabelCluster   = "bootstick.dev/cluster"
	LabelHost      = "bootstick.dev/host"
	LabelRole      = "bootstick.dev/role"
)

// ImagePort is the port the bootstrap machine serves OS images on (Ironic's
// httpd).
const ImagePort = 6180

// Object is a Kubernetes object with metadata.
type Object interface {
	metav1.Object
	runtime.Object
}

// Options are render's inputs besides the site.
type Options struct {
	// SSHKey is the key pair firstboot generated; its public half goes
	// into every host's user data. Required.
	SSHKey *sshkeys.KeyPair
	// Images are the bundle's OS images, needed when a host names one.
	Images []osimage.Image
	// ImageBaseURL is where bundled images are served, ending in "/".
	// Empty means http://PROVISIONING-ADDRESS:6180/images/.
	ImageBaseURL string
	// HostKeys are the SSH host keys firstboot made, one per host by
	// name: each host's cloud-init installs its own, and the BPA trusts
	// no other. A host without one (offline render and validate) makes
	// its own keys, and the BPA will not install it.
	HostKeys map[string]*sshkeys.KeyPair
	// Install is what the BPA installs from the stick (packages, the
	// registry, plugins). Render adds each host's address and host key and
	// writes it as ConfigMap install.ConfigMapName. Nil: no ConfigMap.
	Install *install.Config
}

// BMCSecretName and the others name a host's objects.
func BMCSecretName(host string) string { return host + "-bmc-secret" }

// UserDataSecretName names a host's user-data Secret.
func UserDataSecretName(host string) string { return host + "-user-data" }

// NetworkDataSecretName names a host's network-data Secret.
func NetworkDataSecretName(host string) string { return host + "-network-data" }

// IsHostObject reports whether an object of kind named name is one Render
// makes for host (labelled LabelHost=host): its BareMetalHost, BMC
// credentials, user-data or network-data Secret. The site's other objects
// (the Provisioning, the install ConfigMap, the SSH key) belong to no host.
func IsHostObject(kind, name, host string) bool {
	switch kind {
	case "BareMetalHost":
		return name == host
	case "Secret":
		return name == BMCSecretName(host) || name == UserDataSecretName(host) || name == NetworkDataSecretName(host)
	}
	return false
}

// NetworkDataKey is the key of a network-data Secret that the
// baremetal-operator reads (for both spec.networkData and
// spec.preprovisioningNetworkDataName).
const NetworkDataKey = "networkData"

// Render returns the site's objects in apply order.
func Render(s *site.Site, opts Options) ([]Object, error) {
	if opts.SSHKey == nil {
		return nil, errors.New("rendering site: no SSH key")
	}
	// The hosts take their time from this machine, on the provisioning
	// network (firstboot's clock step).
	pr, perr := netip.ParsePrefix(s.Bootstrap.Provisioning.Address)
	var clock []string
	if perr == nil {
		clock = []string{pr.Addr().String()}
	}
	base := opts.ImageBaseURL
	if base == "" {
		if perr != nil {
			return nil, fmt.Errorf("rendering site: provisioning address: %w", perr)
		}
		base = "http://" + netip.AddrPortFrom(pr.Addr(), ImagePort).String() + "/images/"
	}
	images := map[string]osimage.Image{}
	for _, im := range opts.Images {
		images[im.Name] = im
	}

	hosts := slices.Clone(s.Hosts)
	slices.SortFunc(hosts, func(a, b site.Host) int { return strings.Compare(a.Name, b.Name) })

	var objs []Object
	prov := &bpa.Provisioning{
		TypeMeta:   metav1.TypeMeta{APIVersion: bpa.GroupVersion.String(), Kind: "Provisioning"},
		ObjectMeta: objectMeta(s.Cluster.Name, s, "", ""),
		Spec: bpa.ProvisioningSpec{
			KUDPlugins: slices.Clone(s.Cluster.KUDPlugins),
			PodSubnet:  s.Cluster.PodCIDR,
			// ControlPlaneVIP: the site's, checked there.
			ControlPlaneVIP: s.Cluster.ControlPlaneVIP,
		},
	}
	// The original BPA keys its Provisionings by these labels.
	prov.Labels["cluster"] = s.Cluster.Name
	prov.Labels["owner"] = "bootstick"

	// clusterAddress is each host's address in the application cluster, as
	// its network data gives it ("" for DHCP: the BPA takes the address
	// inspection saw).
	clusterAddress := map[string]string{}
	for _, h := range hosts {
		mac, err := site.NormalizeMAC(h.BootMACAddress)
		if err != nil {
			return nil, fmt.Errorf("rendering host %s: %w", h.Name, err)
		}
		objs = append(objs, &corev1.Secret{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: objectMeta(BMCSecretName(h.Name), s, h.Name, h.Role),
			Type:       corev1.SecretTypeOpaque,
			Data: map[string][]byte{
				"username": []byte(h.BMC.Credentials.Username),
				"password": []byte(h.BMC.Credentials.Password.Reveal()),
			},
		})
		userData, err := userdata.CloudConfig(userdata.Host{Hostname: h.Name, AuthorizedKeys: append([]string{opts.SSHKey.Public}, s.SSHAuthorizedKeys...),
			HostKey: opts.HostKeys[h.Name], NTPServers: clock})
		if err != nil {
			return nil, fmt.Errorf("rendering host %s: %w", h.Name, err)
		}
		objs = append(objs, &corev1.Secret{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: objectMeta(UserDataSecretName(h.Name), s, h.Name, h.Role),
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{userdata.Key: userData},
		})
		network, err := h.Network()
		if err != nil {
			return nil, fmt.Errorf("rendering host %s: %w", h.Name, err)
		}
		var networkData *corev1.SecretReference
		if network != nil {
			clusterAddress[h.Name] = network.ClusterAddress(h.ClusterInterface)
			// The baremetal-operator reads the Secret's networkData key as
			// YAML (JSON is YAML) and hands it to Ironic, which writes it as
			// the config drive's network_data.json: give it that JSON.
			nd, err := network.JSON()
			if err != nil {
				return nil, fmt.Errorf("rendering host %s: %w", h.Name, err)
			}
			objs = append(objs, &corev1.Secret{
				TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
				ObjectMeta: objectMeta(NetworkDataSecretName(h.Name), s, h.Name, h.Role),
				Type:       corev1.SecretTypeOpaque,
				Data:       map[string][]byte{NetworkDataKey: nd},
			})
			networkData = &corev1.SecretReference{Name: NetworkDataSecretName(h.Name), Namespace: Namespace}
		}

		image, err := hostImage(h, images, opts.Images == nil, base)
		if err != nil {
			return nil, err
		}
		bmh := &metal3.BareMetalHost{
			TypeMeta:   metav1.TypeMeta{APIVersion: metal3.GroupVersion.String(), Kind: "BareMetalHost"},
			ObjectMeta: objectMeta(h.Name, s, h.Name, h.Role),
			Spec: metal3.BareMetalHostSpec{
				Online:         true,
				BootMACAddress: mac,
				BootMode:       metal3.BootMode(h.BootMode),
				BMC: metal3.BMCDetails{
					Address:                        h.BMC.Address,
					CredentialsName:                BMCSecretName(h.Name),
					DisableCertificateVerification: h.BMC.DisableCertificateVerification,
				},
				Image:       image,
				UserData:    &corev1.SecretReference{Name: UserDataSecretName(h.Name), Namespace: Namespace},
				NetworkData: networkData,
				Description: fmt.Sprintf("%s of cluster %s", h.Role, s.Cluster.Name),
			},
		}
		// A host booted by virtual media gets no DHCP: its deploy ramdisk
		// takes the same network data, which Ironic puts on the ISO.
		if site.RamdiskNetworkData(h.BMC.Address, h.NetworkData) {
			bmh.Spec.PreprovisioningNetworkDataName = NetworkDataSecretName(h.Name)
		}
		if r := h.RootDeviceHints; r != nil {
			bmh.Spec.RootDeviceHints = &metal3.RootDeviceHints{
				DeviceName: r.DeviceName, HCTL: r.HCTL, Model: r.Model, Vendor: r.Vendor,
				SerialNumber: r.SerialNumber, MinSizeGigabytes: r.MinSizeGigabytes, WWN: r.WWN,
				WWNWithExtension: r.WWNWithExtension, WWNVendorExtension: r.WWNVendorExtension,
				Rotational: r.Rotational,
			}
		}
		objs = append(objs, bmh)

		switch h.Role {
		case site.RoleMaster:
			prov.Spec.Masters = append(prov.Spec.Masters, map[string]bpa.Master{h.Name: {
				MACaddress: mac, CPU: h.Requirements.CPU, Memory: h.Requirements.Memory,
			}})
		case site.RoleWorker:
			prov.Spec.Workers = append(prov.Spec.Workers, map[string]bpa.Worker{h.Name: {
				MACaddress: mac, CPU: h.Requirements.CPU, Memory: h.Requirements.Memory,
				SRIOV: h.Requirements.SRIOV, QAT: h.Requirements.QAT,
			}})
		}
	}
	objs = append(objs, prov)
	if opts.Install != nil {
		cfg := *opts.Install
		cfg.ServiceSubnet = s.Cluster.ServiceCIDR
		// The hosts the BPA gives user data (applied with kubectl) take
		// their time from where the site's do.
		cfg.TimeServers = slices.Clone(clock)
		cfg.Hosts = map[string]install.Host{}
		for _, h := range hosts {
			ih := install.Host{Address: clusterAddress[h.Name]}
			if k := opts.HostKeys[h.Name]; k != nil {
				ih.HostKey = k.Public
			}
			cfg.Hosts[h.Name] = ih
		}
		data, err := cfg.Marshal()
		if err != nil {
			return nil, fmt.Errorf("rendering the install configuration: %w", err)
		}
		objs = append(objs, &corev1.ConfigMap{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: objectMeta(install.ConfigMapName, s, "", ""),
			Data:       map[string]string{install.ConfigKey: data},
		})
	}
	objs = append(objs, &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: objectMeta(SSHKeySecret, s, "", ""),
		Type:       corev1.SecretTypeSSHAuth,
		Data: map[string][]byte{
			corev1.SSHAuthPrivateKey: opts.SSHKey.Private,
			"ssh-publickey":          []byte(opts.SSHKey.Public + "\n"),
		},
	})
	return objs, nil
}

func objectMeta(name string, s *site.Site, host string, role site.Role) metav1.ObjectMeta {
	m := metav1.ObjectMeta{
		Name:      name,
		Namespace: Namespace,
		Labels: map[string]string{
			LabelManagedBy: "bootstick",
			LabelCluster:   s.Cluster.Name,
		},
	}
	if host != "" {
		m.Labels[LabelHost] = host
		m.Labels[LabelRole] = string(role)
	}
	return m
}

func hostImage(h site.Host, images map[string]osimage.Image, noBundle bool, base string) (*metal3.Image, error) {
	im := h.Image
	if im.Bundled != "" {
		b, ok := images[im.Bundled]
		if !ok && noBundle {
			// No bundle known (render without --bundle): the image as the
			// stick serves it, its checksum read from the sha256sum file
			// the stick serves beside it.
			return &metal3.Image{URL: base + im.Bundled + ".qcow2", Checksum: base + im.Bundled + ".qcow2.sha256sum",
				ChecksumType: metal3.SHA256, DiskFormat: ptr("qcow2")}, nil
		}
		if !ok {
			return nil, fmt.Errorf("rendering host %s: image %q is not in the bundle: give --bundle", h.Name, im.Bundled)
		}
		out := &metal3.Image{URL: base + b.File, Checksum: b.SHA256, ChecksumType: metal3.SHA256}
		if b.Format != "" {
			f := b.Format
			out.DiskFormat = &f
		}
		return out, nil
	}
	out := &metal3.Image{URL: im.URL, Checksum: im.Checksum, ChecksumType: metal3.ChecksumType(im.ChecksumType)}
	if im.Format != "" {
		f := im.Format
		out.DiskFormat = &f
	}
	return out, nil
}

func ptr[T any](v T) *T { return &v }
