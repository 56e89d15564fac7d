{{/* Before kubeadm in init.sh and a master's join.sh: kubeadm's patches to
the control plane's static Pods (kubeadm.StallPatches), in .Dir, which
kubeadm's configuration names. A worker's join has none (.Files empty). */}}
{{define "kubeadm-patches"}}{{if .Files}}mkdir -p {{shq .Dir}}
{{range $file, $patch := .Files}}cat >{{shq $.Dir}}/{{shq $file}} <<'END'
{{$patch}}END
{{end}}{{end}}{{end}}
