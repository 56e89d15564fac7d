// Package userdata writes a host's cloud-init user data: the cloud-config
// firstboot renders for each host of the site, and the BPA for a host
// applied with kubectl. One writer, so that both give a host the same.
package userdata

import (
	"bytes"
	"errors"
	"fmt"

	"go.yaml.in/yaml/v3"

	"github.com/bootstick/bootstick/internal/sshkeys"
)

// Key is the user-data Secret's key the baremetal-operator reads.
const Key = "userData"

// header starts every cloud-config.
const header = "#cloud-config\n"

// Host is what a host's user data says.
type Host struct {
	// Hostname is the host's name.
	Hostname string
	// AuthorizedKeys go into root's authorized_keys (the BPA's first).
	AuthorizedKeys []string
	// HostKey is the host's SSH host key, its only one: cloud-init deletes
	// the image's and makes no other. Nil: the image's keys stay (and the
	// BPA, which pins host keys, will not install the host).
	HostKey *sshkeys.KeyPair
	// NTPServers are the host's time servers: cloud-init's ntp module
	// configures the image's systemd-timesyncd, which steps a clock that
	// is far off. None: the image's settings.
	NTPServers []string
}

type ntp struct {
	Enabled bool     `yaml:"enabled"`
	Client  string   `yaml:"ntp_client"`
	Servers []string `yaml:"servers"`
}

// cloudConfig is the part of cloud-init's schema this package writes.
type cloudConfig struct {
	Hostname          string   `yaml:"hostname"`
	SSHAuthorizedKeys []string `yaml:"ssh_authorized_keys"`
	DisableRoot       bool     `yaml:"disable_root"`
	// SSHPwauth is always false: sshd takes keys only (cloud-init's
	// ssh_pwauth sets PasswordAuthentication no).
	SSHPwauth      bool              `yaml:"ssh_pwauth"`
	SSHDeleteKeys  bool              `yaml:"ssh_deletekeys,omitempty"`
	SSHGenKeyTypes *[]string         `yaml:"ssh_genkeytypes,omitempty"`
	SSHKeys        map[string]string `yaml:"ssh_keys,omitempty"`
	NTP            *ntp              `yaml:"ntp,omitempty"`
}

// Private and public host key entries of ssh_keys.
const (
	ed25519Private = "ed25519_private"
	ed25519Public  = "ed25519_public"
)

// CloudConfig is h's user data, a cloud-config document. Its output is
// deterministic (maps are written sorted), so a caller can compare it to
// what it wrote before.
func CloudConfig(h Host) ([]byte, error) {
	cc := cloudConfig{Hostname: h.Hostname, SSHAuthorizedKeys: h.AuthorizedKeys}
	if len(h.NTPServers) > 0 {
		cc.NTP = &ntp{Enabled: true, Client: "systemd-timesyncd", Servers: h.NTPServers}
	}
	if h.HostKey != nil {
		cc.SSHDeleteKeys, cc.SSHGenKeyTypes = true, &[]string{}
		cc.SSHKeys = map[string]string{ed25519Private: string(h.HostKey.Private), ed25519Public: h.HostKey.Public}
	}
	body, err := yaml.Marshal(cc)
	if err != nil {
		return nil, fmt.Errorf("writing cloud-config: %w", err)
	}
	return append([]byte(header), body...), nil
}

// Parse reads back what CloudConfig wrote. The host key's private half
// must match its public half. Its errors never quote the data.
func Parse(data []byte) (Host, error) {
	if !bytes.HasPrefix(data, []byte(header)) {
		return Host{}, errors.New("not a cloud-config (no #cloud-config line)")
	}
	var cc cloudConfig
	if err := yaml.Unmarshal(data, &cc); err != nil {
		return Host{}, errors.New("not a cloud-config the BPA wrote (YAML)")
	}
	h := Host{Hostname: cc.Hostname, AuthorizedKeys: cc.SSHAuthorizedKeys}
	if cc.NTP != nil {
		h.NTPServers = cc.NTP.Servers
	}
	if priv := cc.SSHKeys[ed25519Private]; priv != "" {
		kp, err := sshkeys.Parse([]byte(priv))
		if err != nil {
			return Host{}, fmt.Errorf("its ed25519 host key: %w", err)
		}
		if kp.Public != cc.SSHKeys[ed25519Public] {
			return Host{}, errors.New("its ed25519 host key's public half does not match the private one")
		}
		h.HostKey = kp
	}
	return h, nil
}
