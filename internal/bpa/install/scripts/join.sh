# Joins this host to the cluster, unless it is in it.
if [ -f /etc/kubernetes/kubelet.conf ]; then echo joined; exit 0; fi
umask 077
mkdir -p /etc/bootstick
cat >/etc/bootstick/join.yaml <<'END'
{{.JoinConfig}}END
trap 'rm -f /etc/bootstick/join.yaml' EXIT
kubeadm join --config /etc/bootstick/join.yaml >/var/log/bootstick-kubeadm-join.log 2>&1 || {
	tail -n 8 /var/log/bootstick-kubeadm-join.log >&2
	kubeadm reset --force >/dev/null 2>&1 || true
	exit 6
}
echo joined
