package site

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"filippo.io/age"
	"filippo.io/age/armor"
	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/bootstick/bootstick/internal/config"
	"github.com/bootstick/bootstick/internal/netdata"
	"github.com/bootstick/bootstick/internal/osimage"
)

// Options are the inputs Load needs besides the file.
type Options struct {
	// Identities decrypt encryptedPassword fields. A site without
	// encrypted passwords needs none.
	Identities []age.Identity
	// BundledImages are the OS images the bundle carries. Nil means no
	// bundle is known (validate without --bundle): a bundled image name is
	// then not checked against it.
	BundledImages []osimage.Image
	// Plugins are the KUD plugins the bundle serves. Nil means no bundle
	// is known: cluster.kudPlugins is then not checked against it.
	Plugins []string
	// NewCluster: the site makes its application cluster anew (a stick
	// built with it), so three masters must name cluster.controlPlaneVIP.
	// A running cluster's site may not add one (site.FixedChanges), so it
	// is not required there: such a cluster keeps its first master's
	// address as its endpoint.
	NewCluster bool
}

// Load reads, defaults, resolves and validates the site file at path. Every
// problem is reported in one error with its line and field path. Secrets
// never appear in the error.
func Load(path string, opts Options) (*Site, error) {
	data, err := readRegular(path, maxSiteFile)
	if err != nil {
		return nil, fmt.Errorf("reading site file %s: %w", path, err)
	}
	return Parse(path, data, opts)
}

// Parse is Load for data already read from path.
func Parse(path string, data []byte, opts Options) (*Site, error) {
	var s Site
	doc, err := config.Decode(path, data, Kind, &s)
	if err != nil {
		return nil, err
	}
	s.Dir = filepath.Dir(path)
	errs := s.resolveCredentials(opts.Identities)
	s.setDefaults()
	errs = append(errs, s.validate(opts)...)
	if err := doc.Problems(errs); err != nil {
		return nil, err
	}
	return &s, nil
}

// LoadIdentities reads age identities (as written by age-keygen) from a file.
func LoadIdentities(path string) ([]age.Identity, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading age identity: %w", err)
	}
	defer f.Close()
	ids, err := age.ParseIdentities(f)
	if err != nil {
		// age's parse errors may quote the line; keep them out.
		return nil, fmt.Errorf("reading age identity %s: not an age identity file (make one with age-keygen)", path)
	}
	return ids, nil
}

// credentialsFile is the content of a credentials.file.
type credentialsFile struct {
	Username          string `yaml:"username"`
	Password          Secret `yaml:"password"`
	EncryptedPassword string `yaml:"encryptedPassword"`
}

func (s *Site) resolveCredentials(ids []age.Identity) field.ErrorList {
	var errs field.ErrorList
	for i := range s.Hosts {
		c := &s.Hosts[i].BMC.Credentials
		p := field.NewPath("hosts").Index(i).Child("bmc", "credentials")
		if c.File != "" {
			if c.Username != "" || c.Password != "" || c.EncryptedPassword != "" {
				errs = append(errs, field.Forbidden(p.Child("file"), "give the credentials either inline or in a file, not both"))
				c.unresolved = true
				continue
			}
			path := c.File
			if !filepath.IsAbs(path) {
				path = filepath.Join(s.Dir, path)
			}
			cf, err := readCredentialsFile(path)
			if err != nil {
				errs = append(errs, field.Invalid(p.Child("file"), c.File, err.Error()))
				c.unresolved = true
				continue
			}
			c.Username, c.Password, c.EncryptedPassword = cf.Username, cf.Password, cf.EncryptedPassword
		}
		if c.EncryptedPassword == "" {
			continue
		}
		if c.Password != "" {
			errs = append(errs, field.Forbidden(p.Child("encryptedPassword"), "give password or encryptedPassword, not both"))
			c.unresolved = true
			continue
		}
		if len(ids) == 0 {
			errs = append(errs, field.Required(p.Child("encryptedPassword"), "the password is age-encrypted: give the age identity (--age-identity FILE)"))
			c.unresolved = true
			continue
		}
		pw, err := decrypt(c.EncryptedPassword, ids)
		if err != nil {
			errs = append(errs, field.Invalid(p.Child("encryptedPassword"), field.OmitValueType{}, err.Error()))
			c.unresolved = true
			continue
		}
		c.Password = Secret(pw)
	}
	return errs
}

func readCredentialsFile(path string) (*credentialsFile, error) {
	data, err := readRegular(path, maxCredentialsFile)
	if err != nil {
		return nil, err
	}
	var cf credentialsFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&cf); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("the file is empty: it needs username and password")
		}
		// yaml's messages name fields and lines, never values of string
		// fields; still, say only what kind of problem it is.
		if strings.Contains(err.Error(), "not found in type") {
			return nil, errors.New("it has a field other than username, password and encryptedPassword")
		}
		return nil, errors.New("it is not a YAML mapping with username and password")
	}
	return &cf, nil
}

func decrypt(armored string, ids []age.Identity) (string, error) {
	r, err := age.Decrypt(armor.NewReader(strings.NewReader(strings.TrimSpace(armored)+"\n")), ids...)
	if err != nil {
		var nm *age.NoIdentityMatchError
		if errors.As(err, &nm) {
			return "", errors.New("none of the given age identities can decrypt it")
		}
		return "", errors.New("not an ASCII-armored age file (encrypt with age -a)")
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return "", errors.New("not an ASCII-armored age file, or it is damaged")
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}

// Defaults.
const (
	DefaultBootMode = "UEFI"
)

func (s *Site) setDefaults() {
	if s.Cluster.PodCIDR == "" {
		s.Cluster.PodCIDR = DefaultPodCIDR
	}
	if s.Cluster.ServiceCIDR == "" {
		s.Cluster.ServiceCIDR = DefaultServiceCIDR
	}
	if s.Bootstrap.PodCIDR == "" {
		s.Bootstrap.PodCIDR = DefaultBootstrapPodCIDR
	}
	if s.Bootstrap.ServiceCIDR == "" {
		s.Bootstrap.ServiceCIDR = DefaultBootstrapServiceCIDR
	}
	s.Bootstrap.Provisioning.DHCPHosts = s.Bootstrap.Provisioning.DHCPHostsMode()
	for i := range s.Hosts {
		h := &s.Hosts[i]
		if h.BootMode == "" {
			h.BootMode = DefaultBootMode
		}
		if h.Image.URL != "" && h.Image.ChecksumType == "" {
			switch len(h.Image.Checksum) {
			case 32:
				h.Image.ChecksumType = "md5"
			case 64:
				h.Image.ChecksumType = "sha256"
			case 128:
				h.Image.ChecksumType = "sha512"
			}
		}
	}
}

// Early is what the bootstrap machine needs of a site before it can load it
// in full: its networks, data disk and SSH keys. The full load may need the
// age identity kept on the data disk (encrypted passwords), which is not
// mounted yet. The site was validated when it went on the stick.
type Early struct {
	Bootstrap         Bootstrap   `yaml:"bootstrap"`
	SSHAuthorizedKeys []string    `yaml:"sshAuthorizedKeys"`
	Hosts             []EarlyHost `yaml:"hosts"`
	// Cluster is as written, without defaults.
	Cluster Cluster `yaml:"cluster"`
}

// EarlyHost is what Ironic's configuration needs of a host.
type EarlyHost struct {
	Name string `yaml:"name"`
	BMC  struct {
		Address string `yaml:"address"`
	} `yaml:"bmc"`
	BootMACAddress   string         `yaml:"bootMACAddress"`
	NetworkData      map[string]any `yaml:"networkData"`
	ClusterInterface string         `yaml:"clusterInterface"`
}

// ClusterAddresses are the site's hosts' static cluster addresses (a host
// on DHCP has none), in the site's order.
func (e *Early) ClusterAddresses() []netip.Addr {
	var out []netip.Addr
	for _, h := range e.Hosts {
		if h.NetworkData == nil {
			continue
		}
		// Network data with problems is not on a validated site.
		nd, errs := netdata.Parse(field.NewPath("networkData"), h.NetworkData, h.BootMACAddress)
		if len(errs) > 0 {
			continue
		}
		if a, err := netip.ParseAddr(nd.ClusterAddress(h.ClusterInterface)); err == nil {
			out = append(out, a)
		}
	}
	return out
}

// DHCPHost is a site host's boot NIC as the provisioning network's DHCP
// server sees it.
type DHCPHost struct {
	Name string
	// MAC is the boot MAC in lower case, colon-separated, as dnsmasq
	// reads it.
	MAC string
	// Answer says DHCP answers the host. A host whose deploy ramdisk
	// takes a static address for its boot NIC from its network data on
	// the virtual media is never answered: it needs no address from here,
	// and one would clash with its own. A host whose network data asks
	// for DHCP keeps it.
	Answer bool
}

// DHCPHosts are the boot NICs of the site's hosts, in the site's order.
func (e *Early) DHCPHosts() []DHCPHost {
	var out []DHCPHost
	for _, h := range e.Hosts {
		// The site was validated when it went on the stick: a MAC that
		// does not parse is not there.
		if mac, err := NormalizeMAC(h.BootMACAddress); err == nil {
			out = append(out, DHCPHost{Name: h.Name, MAC: mac, Answer: !h.staticOnVirtualMedia()})
		}
	}
	return out
}

// staticOnVirtualMedia says the host's deploy ramdisk takes a static
// address for its boot NIC from the network data on its virtual media.
func (h EarlyHost) staticOnVirtualMedia() bool {
	if !RamdiskNetworkData(h.BMC.Address, h.NetworkData) {
		return false
	}
	// Network data with problems is not on a validated site.
	nd, errs := netdata.Parse(field.NewPath("networkData"), h.NetworkData, h.BootMACAddress)
	return len(errs) == 0 && nd.StaticOn(h.BootMACAddress)
}

// ReadEarly reads the early part of the site file at path.
func ReadEarly(path string) (*Early, error) {
	data, err := readRegular(path, maxSiteFile)
	if err != nil {
		return nil, fmt.Errorf("reading site file %s: %w", path, err)
	}
	return ParseEarly(path, data)
}

// ParseEarly is ReadEarly for data already read from path.
func ParseEarly(path string, data []byte) (*Early, error) {
	var e Early
	if err := yaml.Unmarshal(data, &e); err != nil {
		return nil, fmt.Errorf("reading site %s: %w (check it with firstboot validate)", path, err)
	}
	return &e, nil
}
