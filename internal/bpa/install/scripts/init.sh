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
kubeadm init --config /etc/bootstick/kubeadm.yaml --skip-token-print --skip-certificate-key-print >/var/log/bootstick-kubeadm-init.log 2>&1 || {
	tail -n 8 /var/log/bootstick-kubeadm-init.log >&2
	kubeadm reset --force >/dev/null 2>&1 || true
	exit 5
}
touch "$mark"
sync
echo created
