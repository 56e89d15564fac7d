# The host's side of a detached job (see detached.go). Called as
#   bash -c "$(this file)" bpa-job ACTION DIR ID [ARG]
# where DIR/ID names the job's files:
#   ID.sh   the script, checked against its SHA-256 before it starts, and
#           removed when it ends (a join's carries a token)
#   ID.pid  the job's process (the leader of its own session and group)
#   ID.log  its output
#   ID.rc   its exit status, written (tmp, then mv) only when it ended
# Actions:
#   start SHA256  the script on standard input: start it, unless this job
#                 already runs or ended (then attach: print running or
#                 finished), or another job of its phase (ID's part before
#                 its last "-") still runs: print "busy OTHER-ID" and start
#                 nothing. Prints started, running, finished or busy.
#   poll WAIT     wait up to WAIT seconds for the job to end; print
#                 "finished RC" and the end of its log, "running", or
#                 "gone" (no result and no process: the host restarted).
#   forget        remove the job's result, process file and script (its
#                 log stays), so that the same job runs anew next time.
#   kill GRACE    SIGTERM the job's process group, SIGKILL what is left
#                 after GRACE seconds, then forget it.
set -u
umask 077
action=$1 dir=$2 id=$3 arg=${4:-}
j=$dir/$id

# state PID prints the process's state letter and process group.
state() {
	local line
	read -r line 2>/dev/null <"/proc/$1/stat" || return 1
	set -- ${line##*") "}
	echo "$1 $3"
}

# alive: the job's leader runs (not a zombie, and is this job's: a pid
# file that outlived a restart names another process, or none).
alive() {
	local p s
	[ -f "$j.pid" ] && read -r p <"$j.pid" && [ -n "$p" ] || return 1
	tr '\0' '\n' <"/proc/$p/cmdline" 2>/dev/null | grep -qxF "$j" || return 1
	s=$(state "$p") || return 1
	[ "${s%% *}" != Z ]
}

# alive_id ID: job ID's leader runs.
alive_id() {
	local j=$dir/$1
	alive
}

# group_alive PGID: a live process of the group is left.
group_alive() {
	local f s pid
	for f in /proc/[0-9]*; do
		pid=${f#/proc/}
		s=$(state "$pid") || continue
		[ "${s%% *}" != Z ] && [ "${s#* }" = "$1" ] && return 0
	done
	return 1
}

case $action in
start)
	mkdir -p "$dir"
	# One start at a time: two could both find no job and start it twice.
	exec 8>"$dir/.start.lock"
	flock -w 60 8 || { echo "another start holds $dir/.start.lock" >&2; exit 96; }
	if [ -e "$j.rc" ]; then cat >/dev/null; echo finished; exit 0; fi
	if alive; then cat >/dev/null; echo running; exit 0; fi
	for f in "$dir/${id%-*}"-*.pid; do
		[ -e "$f" ] || continue
		other=${f##*/} && other=${other%.pid}
		if [ "$other" != "$id" ] && alive_id "$other"; then cat >/dev/null; echo "busy $other"; exit 0; fi
	done
	cat >"$j.sh.part"
	got=$(sha256sum "$j.sh.part") && got=${got%% *}
	if [ "$got" != "$arg" ]; then
		rm -f "$j.sh.part"
		echo "the script arrived with SHA-256 $got, not $arg that was sent: not started" >&2
		exit 97
	fi
	mv -f "$j.sh.part" "$j.sh"
	rm -f "$j.pid" "$j.log"
	# Its own session: it outlives this connection, and its process
	# group is the job's, to kill as one. It ends on a builtin: bash
	# execs a -c string's last external command in place of itself, and
	# a leader that had become mv no longer carried the job's name, so a
	# poll in that instant found neither it nor the result ("gone").
	setsid bash -c 'echo $$ >"$1.pid.part" && mv -f "$1.pid.part" "$1.pid"
bash -euo pipefail "$1.sh" >"$1.log" 2>&1
rc=$?
rm -f "$1.sh"
echo $rc >"$1.rc.part" && sync "$1.rc.part" 2>/dev/null; mv -f "$1.rc.part" "$1.rc"
exit 0' bpa-job "$j" </dev/null >/dev/null 2>&1 8>&- &
	for _ in $(seq 200); do [ -e "$j.pid" ] || [ -e "$j.rc" ] && break; sleep 0.05; done
	[ -e "$j.pid" ] || [ -e "$j.rc" ] || { echo "the job did not start" >&2; exit 98; }
	echo started
	;;
poll)
	end=$((SECONDS + arg))
	while :; do
		if [ -e "$j.rc" ]; then
			read -r rc <"$j.rc"
			echo "finished $rc"
			tail -c 16384 "$j.log" 2>/dev/null
			exit 0
		fi
		if ! alive; then
			[ -e "$j.rc" ] && continue # it ended just now
			echo gone
			tail -c 16384 "$j.log" 2>/dev/null
			exit 0
		fi
		[ "$SECONDS" -ge "$end" ] && { echo running; exit 0; }
		sleep 0.2
	done
	;;
forget)
	rm -f "$j.rc" "$j.pid" "$j.sh"
	;;
kill)
	if alive; then
		read -r p <"$j.pid"
		kill -TERM -- "-$p" 2>/dev/null
		for _ in $(seq $((arg * 10))); do group_alive "$p" || break; sleep 0.1; done
		kill -KILL -- "-$p" 2>/dev/null
		for _ in $(seq 50); do group_alive "$p" || break; sleep 0.1; done
		if group_alive "$p"; then echo "process group $p survived SIGKILL" >&2; exit 99; fi
	fi
	rm -f "$j.rc" "$j.pid" "$j.sh"
	;;
*)
	echo "unknown action $action" >&2
	exit 2
	;;
esac
