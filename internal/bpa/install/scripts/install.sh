# Installs the stick's packages on this host and readies it for kubeadm.
# Idempotent: a file already here with the right checksum is kept, a
# package already installed at its version is left alone, and a dpkg run
# cut short is finished first.
export DEBIAN_FRONTEND=noninteractive
dir={{shq .Dir}}
mkdir -p "$dir" /etc/bootstick
{{template "fetch.sh" .}}dpkg --configure -a
debs=()
{{range .Debs}}[ "$(dpkg-query -W -f='${Version} ${db:Status-Status}' {{shq .Name}} 2>/dev/null || true)" = {{shq .Version}}" installed" ] || debs+=("$dir/"{{shq .File}})
{{end}}
if [ ${#debs[@]} -gt 0 ]; then dpkg -i "${debs[@]}" >/dev/null; fi

put() { # SRC DEST MODE
	if ! cmp -s "$1" "$2"; then install -D -m "$3" "$1" "$2.bootstick-new" && mv "$2.bootstick-new" "$2"; fi
}
{{range .Binaries}}put "$dir/"{{shq .Name}} {{shq .Path}} 0755
{{end}}
# Debian's CNI plugins (a bundle that ships the .deb), where containerd
# looks for them, for those the stick's own plugins do not replace.
mkdir -p /opt/cni/bin
for p in /usr/lib/cni/*; do
	[ -e "$p" ] || continue
	n=/opt/cni/bin/${p##*/}
	if [ ! -e "$n" ] || [ -L "$n" ]; then ln -sfn "$p" "$n"; fi
done

write() { # DEST: standard input to DEST, replaced whole
	mkdir -p "$(dirname "$1")"
	cat >"$1.bootstick-new" && mv "$1.bootstick-new" "$1"
}
write /etc/modules-load.d/bootstick-kubernetes.conf <<'END'
overlay
br_netfilter
END
modprobe overlay
modprobe br_netfilter
write /etc/sysctl.d/90-bootstick-kubernetes.conf <<'END'
net.ipv4.ip_forward = 1
net.bridge.bridge-nf-call-iptables = 1
net.bridge.bridge-nf-call-ip6tables = 1
END
sysctl -q --system
swapoff -a

write /etc/containerd/config.toml <<'END'
{{.ContainerdConfig}}END
{{range $reg, $toml := .HostsTOML}}write /etc/containerd/certs.d/{{$reg}} <<'END'
{{$toml}}END
{{end}}
{{if .CNIConfig}}write /etc/cni/net.d/10-flannel.conflist <<'END'
{{.CNIConfig}}END
{{end}}
{{if .DHCPDaemon}}# The dhcp IPAM plugin's daemon, which holds a DHCP lease for each pod
# interface whose network (a NetworkAttachmentDefinition) says ipam: dhcp:
# started by its socket, where the plugin asks it.
write /etc/systemd/system/cni-dhcp.socket <<'END'
[Unit]
Description=the CNI dhcp plugin's daemon: its socket
PartOf=cni-dhcp.service

[Socket]
ListenStream=/run/cni/dhcp.sock
SocketMode=0600
RemoveOnStop=true

[Install]
WantedBy=sockets.target
END
write /etc/systemd/system/cni-dhcp.service <<'END'
[Unit]
Description=the CNI dhcp plugin's daemon: DHCP leases for pod interfaces
Requires=cni-dhcp.socket
After=network-online.target cni-dhcp.socket

[Service]
ExecStart=/opt/cni/bin/dhcp daemon
Restart=on-failure

[Install]
WantedBy=multi-user.target
END
{{end}}write /etc/systemd/system/kubelet.service <<'END'
[Unit]
Description=kubelet: the Kubernetes node agent
Wants=network-online.target containerd.service
After=network-online.target containerd.service

[Service]
ExecStart=/usr/bin/kubelet
Restart=always
RestartSec=5
StartLimitInterval=0

[Install]
WantedBy=multi-user.target
END
write /etc/systemd/system/kubelet.service.d/10-kubeadm.conf <<'END'
[Service]
Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf"
Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
EnvironmentFile=-/etc/default/kubelet
ExecStart=
ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
END
systemctl daemon-reload
systemctl enable containerd kubelet >/dev/null 2>&1
{{if .DHCPDaemon}}systemctl enable --now cni-dhcp.socket >/dev/null 2>&1
{{end}}systemctl restart containerd
for i in $(seq 60); do [ -S /run/containerd/containerd.sock ] && break; sleep 1; done
[ -S /run/containerd/containerd.sock ] || { echo "containerd did not start: see journalctl -u containerd" >&2; exit 4; }

# The cluster's images, each pulled from the stick's registry by the
# lock's digest (containerd checks every byte against it) and then named
# by its tag, as kubeadm and the kubelet ask for it: nothing on this host
# pulls an image by tag.
pull() { # PINNED NAME
	local out
	out=$(ctr -n k8s.io images pull --hosts-dir /etc/containerd/certs.d "$1" 2>&1) || {
		printf '%s\n' "$out" | tail -n 5 >&2
		echo "pulling $1 from the stick's registry failed: check that firstboot status shows the registry serving" >&2
		exit 8
	}
	ctr -n k8s.io images tag --force "$1" "$2" >/dev/null
}
{{range .Images}}pull {{shq .Pinned}} {{shq .Name}}
{{end}}{{with .Encryption}}
# The cluster's key for Secrets at rest, which the API server reads: the
# same file on every master. A different one here is another cluster's
# (or another key's), and replacing it would leave the Secrets its API
# server wrote unreadable.
enc={{shq .Path}}
install -d -m 0700 "$(dirname "$enc")"
cat >"$enc.bootstick-new" <<'END'
{{.Config}}END
chmod 0600 "$enc.bootstick-new"
if [ -e "$enc" ] && ! cmp -s "$enc.bootstick-new" "$enc"; then
	rm -f "$enc.bootstick-new"
	echo "$enc holds another key than cluster {{.Cluster}}'s: this host's disk belongs to another cluster; provision the host again" >&2
	exit 7
fi
mv "$enc.bootstick-new" "$enc"
{{end}}{{with .VRRP}}
# The control plane's VIP: keepalived holds it on the network of this
# master's own address, on the interface that has that address.
command -v keepalived >/dev/null || { echo "keepalived is not installed: a cluster with a control-plane VIP needs it in its masters' OS image (the stick's debian-13-compute has it)" >&2; exit 6; }
own=$(ip -o -4 addr show | awk -v a={{shq .Address}} '{split($4, p, "/"); if (p[1] == a) {print $2, p[2]; exit}}')
dev=${own% *} bits=${own#* }
[ -n "$own" ] || { echo "no interface holds this host's address {{.Address}}: the VIP {{.VIP}} goes on that network" >&2; exit 6; }
mkdir -p /etc/keepalived
cat >/etc/keepalived/keepalived.conf.bootstick-new <<END
{{.Config}}END
chmod 0600 /etc/keepalived/keepalived.conf.bootstick-new
systemctl enable keepalived >/dev/null 2>&1
if cmp -s /etc/keepalived/keepalived.conf.bootstick-new /etc/keepalived/keepalived.conf; then
	rm -f /etc/keepalived/keepalived.conf.bootstick-new
	systemctl start keepalived || true
else
	mv /etc/keepalived/keepalived.conf.bootstick-new /etc/keepalived/keepalived.conf
	systemctl restart keepalived || true
fi
systemctl is-active --quiet keepalived || { echo "keepalived did not start: see journalctl -u keepalived" >&2; exit 6; }
{{end}}echo installed
