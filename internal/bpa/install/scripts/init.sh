# Creates the cluster on the first master, unless it exists.
if [ -f /etc/kubernetes/admin.conf ]; then echo exists; exit 0; fi
umask 077
mkdir -p /etc/bootstick
cat >/etc/bootstick/kubeadm.yaml <<'END'
{{.KubeadmConfig}}END
kubeadm init --config /etc/bootstick/kubeadm.yaml --skip-token-print --skip-certificate-key-print >/var/log/bootstick-kubeadm-init.log 2>&1 || {
	tail -n 8 /var/log/bootstick-kubeadm-init.log >&2
	kubeadm reset --force >/dev/null 2>&1 || true
	exit 5
}
echo created
