{{/* The start of init.sh and join.sh: the run goes on to its end whatever
happens to its session, waits for any other kubeadm on the host, and ends
at once when its kubeadm ended well here before (.Mark, written only then;
.Done is what it prints). A host set up before these marks (no lock file)
is kept as it is only when what it made answers: .Live, a kubectl call
with .Conf's credentials (a file's existence proves nothing: kubeadm
writes it early). */}}{{define "kubeadm-once"}}trap '' HUP PIPE TERM
umask 077
mark=/etc/bootstick/{{.Mark}}
if [ ! -e /etc/bootstick/kubeadm.lock ] && [ -e {{.Conf}} ] && {{.Live}} >/dev/null 2>&1; then
	mkdir -p /etc/bootstick && touch "$mark" && sync
fi
mkdir -p /etc/bootstick
exec 9>/etc/bootstick/kubeadm.lock
flock -w 1800 9 || { echo "another kubeadm has run on this host for 30 minutes: see /var/log/bootstick-kubeadm-*.log there" >&2; exit 7; }
if [ -f "$mark" ]; then echo {{.Done}}; exit 0; fi
{{end}}
