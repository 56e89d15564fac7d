{{/* The stick's packages, fetched into $dir (the caller sets it) and
checked against the lock: a file already there with the right checksum
is kept. Included by install.sh. */ -}}
fetch() { # NAME SHA256
	local f="$dir/$1"
	if [ -f "$f" ] && echo "$2  $f" | sha256sum -c --status; then return 0; fi
	curl -fsS --retry 5 --retry-connrefused --connect-timeout 10 -o "$f.part" {{shq .PackagesURL}}"$1"
	if ! echo "$2  $f.part" | sha256sum -c --status; then
		rm -f "$f.part"
		echo "$1 from {{.PackagesURL}} does not match its checksum in the stick's lock: the stick's copy is damaged; rebuild or re-write the stick" >&2
		exit 3
	fi
	mv "$f.part" "$f"
}
fetchz() { # NAME SHA256 SHA256-OF-NAME.zst: the stick's zstd copy, unpacked here
	local f="$dir/$1"
	if [ -f "$f" ] && echo "$2  $f" | sha256sum -c --status; then return 0; fi
	command -v zstd >/dev/null || { echo "zstd is not installed: the stick serves $1 compressed, and this host's OS image needs zstd to unpack it (the stick's debian-13-compute has it)" >&2; exit 6; }
	fetch "$1.zst" "$3"
	if ! zstd -q -d -f -o "$f.part" "$f.zst" || ! echo "$2  $f.part" | sha256sum -c --status; then
		rm -f "$f.part" "$f.zst"
		echo "$1, unpacked from $1.zst, does not match its checksum in the stick's lock: the stick's copy is damaged; rebuild or re-write the stick" >&2
		exit 3
	fi
	mv "$f.part" "$f"
	rm -f "$f.zst"
}
{{range .Debs}}fetch {{shq .File}} {{.SHA256}}
{{end}}{{range .Binaries}}{{if .Zstd}}fetchz {{shq .Name}} {{.SHA256}} {{.Zstd}}{{else}}fetch {{shq .Name}} {{.SHA256}}{{end}}
{{end}}
