# Joins this host to the cluster, unless kubeadm join ended well here
# before (its mark, written only then: a control-plane join writes
# kubelet.conf before its etcd member exists). One kubeadm at a time, as
# in init.sh: a run whose session was cut goes on to its end, a second
# waits for it. A join cut short otherwise is undone and made again.
{{template "kubeadm-once" .Once}}
# The host that made the cluster is in it: never undone by a join.
if [ -f /etc/bootstick/kubeadm-init.done ]; then echo joined; exit 0; fi
if [ -e /etc/kubernetes/kubelet.conf ]; then
	kubeadm reset --force >/var/log/bootstick-kubeadm-reset.log 2>&1 || true
fi
cat >/etc/bootstick/join.yaml <<'END'
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
