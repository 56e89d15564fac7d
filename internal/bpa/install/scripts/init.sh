# Creates the cluster on the first master, unless kubeadm init ended well
# here before (its mark, written only then). One kubeadm at a time: a run
# whose session was cut or stopped goes on to its end (it ignores the
# hangup, its closed output and SIGTERM), and a second run waits for it
# and reads its mark. An init cut short otherwise (the host went down)
# left files but no mark: kubeadm cannot resume one, so it is undone and
# made again.
{{template "kubeadm-once" .Once}}
if [ -e /etc/kubernetes/admin.conf ] || [ -e /etc/kubernetes/manifests/etcd.yaml ]; then
	kubeadm reset --force >/var/log/bootstick-kubeadm-reset.log 2>&1 || true
fi
cat >/etc/bootstick/kubeadm.yaml <<'END'
{{.KubeadmConfig}}END
kubeadm init --config /etc/bootstick/kubeadm.yaml --skip-token-print --skip-certificate-key-print >/var/log/bootstick-kubeadm-init.log 2>&1 || {
	tail -n 8 /var/log/bootstick-kubeadm-init.log >&2
	kubeadm reset --force >/dev/null 2>&1 || true
	exit 5
}
touch "$mark"
sync
echo created
