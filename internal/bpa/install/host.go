package install

import (
	"context"
	"fmt"
	"net"
	"strings"

	"golang.org/x/crypto/ssh"
)

// SSHPort is where hosts' sshd listens.
const SSHPort = "22"

// Connect dials host name at address (the config's when empty), pinning
// the host key the config gives for it.
func Connect(ctx context.Context, c *Config, key ssh.Signer, name, address string) (*Client, error) {
	h, ok := c.Hosts[name]
	if !ok || h.HostKey == "" {
		return nil, fmt.Errorf("no host key for host %s: ConfigMap %s names none (firstboot writes one per host of the site), nor does its BareMetalHost's annotation bpa.akraino.org/host-key", name, ConfigMapName)
	}
	if address == "" {
		address = h.Address
	}
	if address == "" {
		return nil, fmt.Errorf("host %s has no address: give it a static address in the site's networkData, or annotate its BareMetalHost bpa.akraino.org/address", name)
	}
	hk, _, _, _, err := ssh.ParseAuthorizedKey([]byte(h.HostKey))
	if err != nil {
		return nil, fmt.Errorf("ConfigMap %s: the host key of %s: %w", ConfigMapName, name, err)
	}
	// An address may carry sshd's port.
	if _, _, err := net.SplitHostPort(address); err != nil {
		address = net.JoinHostPort(address, SSHPort)
	}
	return Dial(ctx, address, key, hk)
}

// What the queries below are called; the fake answers by these.
const (
	whatKubeconfig  = "reading the admin kubeconfig"
	whatToken       = "creating a bootstrap token"
	whatCA          = "reading the cluster's CA"
	whatUploadCerts = "uploading the control-plane certificates"
	whatNodes       = "reading the nodes"
)

// Kubeconfig reads the cluster's admin kubeconfig from a master.
func Kubeconfig(ctx context.Context, master Querier) ([]byte, error) {
	return master.Query(ctx, whatKubeconfig, "cat /etc/kubernetes/admin.conf\n")
}

// JoinSecrets makes what a host needs to join, on a master: a
// bootstrap token for an hour, the CA's hash and, for a master, the
// control-plane certificates uploaded under a new key.
func JoinSecrets(ctx context.Context, master Querier, controlPlane bool) (Join, error) {
	out, err := master.Query(ctx, whatToken, "kubeadm token create --ttl 1h0m0s\n")
	if err != nil {
		return Join{}, err
	}
	j := Join{Token: strings.TrimSpace(string(out))}
	ca, err := master.Query(ctx, whatCA, "cat /etc/kubernetes/pki/ca.crt\n", j.Token)
	if err != nil {
		return Join{}, err
	}
	if j.CACertHash, err = CACertHash(ca); err != nil {
		return Join{}, err
	}
	if controlPlane {
		out, err := master.Query(ctx, whatUploadCerts,
			"kubeadm init phase upload-certs --upload-certs 2>/dev/null | tail -n 1\n", j.Token)
		if err != nil {
			return Join{}, err
		}
		j.CertificateKey = strings.TrimSpace(string(out))
	}
	return j, nil
}

// Apply applies a manifest with the master's kubectl.
func Apply(ctx context.Context, master Querier, what, manifest string) error {
	script := "kubectl --kubeconfig /etc/kubernetes/admin.conf apply -f - >/dev/null <<'BOOTSTICK_END'\n" + manifest + "BOOTSTICK_END\n"
	_, err := master.Query(ctx, "applying "+what, script)
	return err
}

// NodesReady reads, on a master, which nodes are Ready.
func NodesReady(ctx context.Context, master Querier) (map[string]bool, error) {
	out, err := master.Query(ctx, whatNodes,
		`kubectl --kubeconfig /etc/kubernetes/admin.conf get nodes -o jsonpath='{range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}'`+"\n")
	if err != nil {
		return nil, err
	}
	ready := map[string]bool{}
	for _, l := range strings.Split(string(out), "\n") {
		if name, st, ok := strings.Cut(strings.TrimSpace(l), "="); ok {
			ready[name] = st == "True"
		}
	}
	return ready, nil
}
