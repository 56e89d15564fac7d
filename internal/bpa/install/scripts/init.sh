# Creates the cluster on the first master, unless kubeadm init ended well
# here before (its mark, written only then). The BPA runs it detached (its
# own session, see jobs/job.sh), so a lost connection stops nothing; it
# still ignores the hangup, a closed output and SIGTERM, and one kubeadm
# runs at a time: a second run waits for the first and reads its mark.
# An init cut short otherwise (the host went down, its deadline killed
# it) left files but no mark: kubeadm cannot resume one, so it is undone
# and made again. That never undoes a node the BPA recorded: it records
# one only after this script ended well and the cluster answered with
# its addons and bootstrap RBAC. The mark is not that proof either; the
# BPA reads the cluster's state after it (observe.go).
{{template "kubeadm-once" .Once}}
if [ -e /etc/kubernetes/admin.conf ] || [ -e /etc/kubernetes/manifests/etcd.yaml ]; then
	kubeadm reset --force >/var/log/bootstick-kubeadm-reset.log 2>&1 || true
fi
{{template "kubeadm-patches" .Patches}}cat >/etc/bootstick/kubeadm.yaml <<'END'
{{.KubeadmConfig}}END
# etcd and the API server start alone, and the rest of the control plane
# once the API server is ready (kubeadm.APIServerFirst says why).
failed() {
	echo "$1" >&2
	tail -n 8 /var/log/bootstick-kubeadm-init.log >&2
	kubeadm reset --force >/dev/null 2>&1 || true
	exit 5
}
: >/var/log/bootstick-kubeadm-init.log
for phase in preflight{{range .First}} {{shq .}}{{end}} kubelet-start; do
	# shellcheck disable=SC2086 # a phase is its words
	kubeadm init phase $phase --config /etc/bootstick/kubeadm.yaml >>/var/log/bootstick-kubeadm-init.log 2>&1 || failed "kubeadm init phase $phase failed"
done
# ready waits for the API server's /readyz, or fails with $1.
ready() {
	deadline=$(($(date +%s) + {{.ReadySeconds}}))
	until kubectl --kubeconfig /etc/kubernetes/admin.conf --server {{shq .Server}} --request-timeout=20s get --raw /readyz >/dev/null 2>&1; do
		[ "$(date +%s)" -lt "$deadline" ] || {
			journalctl -u kubelet -n 8 --no-pager >>/var/log/bootstick-kubeadm-init.log 2>&1 || true
			failed "$1 (the kubelet's last lines follow kubeadm's)"
		}
		sleep 5
	done
}
ready "the API server, started alone with etcd, was not ready within {{.ReadySeconds}} s"
# A second run of the rest keeps the certificates and kubeconfigs it
# finds, writes the same manifests again (the kubelet leaves their Pods
# running), and creates or updates what every later phase makes (one more
# bootstrap token, unused, gone in 24 hours): it finishes what the first
# left (an API call that timed out on a loaded host) on the same cluster,
# instead of undoing it.
rest() {
	kubeadm init --config /etc/bootstick/kubeadm.yaml --skip-phases={{.Skip}} --skip-token-print --skip-certificate-key-print >>/var/log/bootstick-kubeadm-init.log 2>&1
}
if ! rest; then
	echo "kubeadm init failed; running it again on the same cluster" >>/var/log/bootstick-kubeadm-init.log
	ready "kubeadm init failed, and the API server was not ready within {{.ReadySeconds}} s after"
	rest || failed "kubeadm init failed twice"
fi
touch "$mark"
sync
echo created
