package site

import (
	"regexp"
	"slices"
	"strings"

	"golang.org/x/crypto/ssh"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

var (
	// UEFISecureBoot by virtual media only: a PXE boot starts iPXE, which
	// is not signed, so Secure Boot firmware refuses it.
	bootModes      = []string{"UEFI", "UEFISecureBoot", "legacy"}
	checksumTypes  = []string{"md5", "sha256", "sha512", "auto"}
	diskFormats    = []string{"raw", "qcow2", "vdi", "vmdk", "live-iso"}
	roles          = []string{string(RoleMaster), string(RoleWorker)}
	dhcpHostsModes = []string{DHCPHostsSite, DHCPHostsAny}
	hexDigits      = regexp.MustCompile(`^[0-9a-fA-F]+$`)
	hctlPattern    = regexp.MustCompile(`^\d+:\d+:\d+:\d+$`)
	ifaceName      = regexp.MustCompile(`^[A-Za-z0-9_.:@-]{1,15}$`)
)

func (s *Site) validate(opts Options) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, s.Bootstrap.validate(field.NewPath("bootstrap"))...)
	errs = append(errs, s.validateBMCCA()...)
	nets, nerrs := s.hostNetworks()
	errs = append(errs, nerrs...)
	errs = append(errs, s.validateRanges(nets)...)
	errs = append(errs, s.validateHosts(opts)...)
	errs = append(errs, s.Cluster.validate(field.NewPath("cluster"), s.Bootstrap, opts.Plugins)...)
	errs = append(errs, s.validateVIP(nets, opts.NewCluster)...)
	for i, k := range s.SSHAuthorizedKeys {
		p := field.NewPath("sshAuthorizedKeys").Index(i)
		if strings.TrimSpace(k) == "" {
			errs = append(errs, field.Required(p, "an empty entry: fill it in or remove it"))
			continue
		}
		if strings.Contains(k, "PRIVATE KEY") {
			errs = append(errs, field.Invalid(p, field.OmitValueType{}, "this is a private key: remove it from the file and give its public half (the .pub file)"))
			continue
		}
		if _, _, _, rest, err := ssh.ParseAuthorizedKey([]byte(k)); err != nil || strings.TrimSpace(string(rest)) != "" {
			errs = append(errs, field.Invalid(p, field.OmitValueType{}, "not one SSH public key in authorized_keys format (ssh-ed25519 AAAA... comment)"))
		}
	}
	return errs
}

func (c *Cluster) validate(p *field.Path, b Bootstrap, plugins []string) field.ErrorList {
	var errs field.ErrorList
	np := p.Child("name")
	if c.Name == "" {
		errs = append(errs, field.Required(np, "name the cluster (a DNS label)"))
	} else if len(validation.IsDNS1123Label(c.Name)) > 0 {
		errs = append(errs, field.Invalid(np, c.Name, "must be a DNS-1123 label: lower-case letters, digits and '-'"))
	}
	seen := map[string]bool{}
	for i, pl := range c.KUDPlugins {
		pp := p.Child("kudPlugins").Index(i)
		switch {
		case pl == "":
			errs = append(errs, field.Required(pp, "an empty entry: fill it in or remove it"))
		case len(validation.IsDNS1123Label(pl)) > 0:
			errs = append(errs, field.Invalid(pp, pl, "not a plugin name (a DNS label such as emco)"))
		case seen[pl]:
			errs = append(errs, field.Duplicate(pp, pl))
		case plugins != nil && !contains(plugins, pl):
			serves := "no KUD plugins"
			if len(plugins) > 0 {
				serves = "the KUD plugins " + strings.Join(plugins, ", ") + " only"
			}
			errs = append(errs, field.Invalid(pp, pl, "the stick serves "+serves+": remove it, or build a stick that carries it"))
		}
		seen[pl] = true
	}
	return errs
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func sortedStrings(s []string) []string {
	slices.Sort(s)
	return s
}
