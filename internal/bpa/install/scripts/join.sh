# Joins this host to the cluster, unless kubeadm join ended well here
# before (its mark, written only then). Run detached and one kubeadm at a
# time, as init.sh is. A join cut short otherwise is undone and made
# again; a node the BPA recorded never is (it records one only once the
# node is Ready and, for a master, its etcd member started: observe.go).
{{template "kubeadm-once" .Once}}
# The host that made the cluster is in it: never undone by a join.
if [ -f /etc/bootstick/kubeadm-init.done ]; then echo joined; exit 0; fi
if [ -e /etc/kubernetes/kubelet.conf ]; then
	kubeadm reset --force >/var/log/bootstick-kubeadm-reset.log 2>&1 || true
fi
{{template "kubeadm-patches" .Patches}}cat >/etc/bootstick/join.yaml <<'END'
{{.JoinConfig}}END
trap 'rm -f /etc/bootstick/join.yaml' EXIT
kubeadm join --config /etc/bootstick/join.yaml >/var/log/bootstick-kubeadm-join.log 2>&1 || {
	tail -n 8 /var/log/bootstick-kubeadm-join.log >&2
	kubeadm reset --force >/dev/null 2>&1 || true
	exit 6
}
touch "$mark"
sync
echo joined
