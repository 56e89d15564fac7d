package install

import (
	"fmt"
	"hash/fnv"
	"net/netip"
)

// The masters' VRRP priorities. The first master starts above the others
// and each master's priority drops by VRRPCheckWeight while its own API
// server does not answer, so that:
//   - before kubeadm init, the first master (150-60 = 90) holds the VIP
//     over the others (100-60 = 40): init reaches its own API there;
//   - once the cluster runs, a master whose API answers holds it, the
//     first (150) before the others (100);
//   - a first master provisioned again (90 until it has joined back)
//     does not take the VIP from the others (100), whose API answers.
const (
	VRRPFirstPriority = 150
	VRRPPriority      = 100
	VRRPCheckWeight   = 60
)

// VRRPRouterID is the cluster's VRRP router ID (1-255), from its name:
// two clusters on one network must differ, which a name's hash makes
// likely, not certain (the README says so).
func VRRPRouterID(cluster string) int {
	h := fnv.New32a()
	h.Write([]byte(cluster))
	return int(h.Sum32()%255) + 1
}

// keepalivedConfig is host's keepalived.conf for the cluster's VIP. The
// install script writes it through a shell here-document: $dev and
// $bits are the interface and prefix length of the host's own address,
// which the script reads on the host (the VIP goes on that network).
func keepalivedConfig(cl Cluster, host string) (string, error) {
	vip, err := netip.ParseAddr(cl.VIP)
	if err != nil || !vip.Is4() {
		return "", fmt.Errorf("the control plane's VIP %q is not an IPv4 address", cl.VIP)
	}
	prio := VRRPPriority
	if host == cl.FirstMaster {
		prio = VRRPFirstPriority
	}
	// The check asks the host's own API server whether it serves
	// (/readyz: not while it starts, stops or has lost etcd); kubeadm lets
	// anyone read it. curl is in the compute image, and keepalived runs
	// it as root (its script security wants the user named). init_fail:
	// a master starts as failing, at its lower priority, until a check
	// passes, so the ordering above holds from keepalived's start.
	return fmt.Sprintf(`# Written by the bootstick BPA: the control plane's VIP of cluster %[1]s.
global_defs {
	router_id %[2]s
	enable_script_security
	script_user root
}
vrrp_script apiserver {
	script "/usr/bin/curl -sfk --max-time 3 -o /dev/null https://127.0.0.1:6443/readyz"
	interval 3
	timeout 4
	fall 2
	rise 2
	weight -%[3]d
	init_fail
}
vrrp_instance %[1]s {
	state BACKUP
	interface $dev
	virtual_router_id %[4]d
	priority %[5]d
	advert_int 1
	virtual_ipaddress {
		%[6]s/$bits dev $dev
	}
	track_script {
		apiserver
	}
}
`, cl.Name, host, VRRPCheckWeight, VRRPRouterID(cl.Name), prio, vip), nil
}
