package install

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bootstick/bootstick/internal/testctx"
)

// scriptHost runs the BPA's scripts as on a host: bash -euo pipefail -s,
// in a mount namespace where /etc and /var/log are folders of the test's
// own (shared by every run, as one host's are), with a fake kubeadm first
// on the PATH that logs each call and makes or removes admin.conf and
// kubelet.conf as the real one does, and a fake kubectl that answers
// while /etc/fake-api-answers exists.
type scriptHost struct {
	t                     *testing.T
	dir, etc, log, calls  string
	started, release, bin string
}

func newScriptHost(t *testing.T) *scriptHost {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("binds folders over /etc and /var/log in a mount namespace (root)")
	}
	d := t.TempDir()
	h := &scriptHost{t: t, dir: d, etc: filepath.Join(d, "etc"), log: filepath.Join(d, "log"), calls: filepath.Join(d, "calls"),
		started: filepath.Join(d, "started"), release: filepath.Join(d, "release"), bin: filepath.Join(d, "bin")}
	for _, p := range []string{h.etc, h.log, h.bin} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{h.started, h.release} {
		if err := exec.Command("mkfifo", f).Run(); err != nil {
			t.Fatal(err)
		}
	}
	// KUBEADM_BLOCK: the call tells the test it began (started) and waits
	// for the test's word (release) before it ends.
	// A phase of init is logged as init/PHASE[:SUBPHASE] and the last
	// init with what it skips; each writes the files the real one does,
	// and the API server "runs" once its manifest is written.
	fake := `#!/bin/sh
case "$1 $2" in
"init phase") echo "init/$3${4:+:$4}" | sed 's/:--.*//' >>` + h.calls + ` ;;
"init "*) echo "init$(printf ' %s' "$@" | grep -o ' --skip-phases=[^ ]*' | sed 's/ --skip-phases=/[skip /;s/$/]/')" >>` + h.calls + ` ;;
*) echo "$1" >>` + h.calls + ` ;;
esac
# /etc/fake-init-fails holds how many more of the last inits fail (an
# API call that timed out), having done nothing.
if [ "$1" = init ] && [ "$2" != phase ] && [ -s /etc/fake-init-fails ]; then
	n=$(cat /etc/fake-init-fails); [ "$n" -gt 1 ] && echo $((n - 1)) >/etc/fake-init-fails || rm /etc/fake-init-fails
	exit 1
fi
if [ -n "${KUBEADM_BLOCK:-}" ] && [ "$1" != reset ] && [ "$2" != phase ]; then echo >` + h.started + `; read _ <` + h.release + `; fi
mkdir -p /etc/kubernetes/manifests
case "$1 $2 $3" in
"init phase kubeconfig") touch /etc/kubernetes/admin.conf ;;
"init phase etcd") touch /etc/kubernetes/manifests/etcd.yaml ;;
"init phase control-plane") touch /etc/kubernetes/manifests/kube-apiserver.yaml ;;
"init phase "*) ;;
init*) touch /etc/kubernetes/admin.conf /etc/kubernetes/manifests/etcd.yaml /etc/kubernetes/manifests/kube-apiserver.yaml ;;
join*) touch /etc/kubernetes/kubelet.conf ;;
reset*) rm -rf /etc/kubernetes ;;
esac
exit 0
`
	if err := os.WriteFile(filepath.Join(h.bin, "kubeadm"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	// kubectl: the cluster answers while /etc/fake-api-answers exists; a
	// call naming the node's own API server (--server), once init's
	// control-plane phase wrote its manifest.
	kubectl := "#!/bin/sh\ncase \"$*\" in *--server*) [ -e /etc/kubernetes/manifests/kube-apiserver.yaml ] ;; *) [ -e /etc/fake-api-answers ] ;; esac\n"
	if err := os.WriteFile(filepath.Join(h.bin, "kubectl"), []byte(kubectl), 0o755); err != nil {
		t.Fatal(err)
	}
	return h
}

// cmd is one run of script on the host, its output to out.
func (h *scriptHost) cmd(script string, out io.Writer, env ...string) *exec.Cmd {
	c := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c",
		`mount --bind "$1" /etc && mount --bind "$2" /var/log && exec bash -euo pipefail -s`, "sh", h.etc, h.log)
	c.Env = append(os.Environ(), append(env, "PATH="+h.bin+":"+os.Getenv("PATH"))...)
	c.Stdin, c.Stdout, c.Stderr = strings.NewReader(wholeScript(script)), out, out
	return c
}

// run runs script to its end and returns its output.
func (h *scriptHost) run(script string) string {
	h.t.Helper()
	var out bytes.Buffer
	if err := h.cmd(script, &out).Run(); err != nil {
		h.t.Fatalf("the script failed: %v\n%s", err, out.String())
	}
	return strings.TrimSpace(out.String())
}

// takeCalls returns the fake kubeadm's calls since the last take.
func (h *scriptHost) takeCalls() string {
	b, _ := os.ReadFile(h.calls)
	os.Remove(h.calls)
	return strings.Join(strings.Fields(string(b)), " ")
}

// TestKubeadmScriptsFinishOnTheirMark: init and join count as done only
// when kubeadm ended well on the host (their mark), not when the files it
// writes early exist: a run again does nothing, and one cut short (its
// files, no mark) is undone and made again. A host set up before the
// marks is kept only when what it made answers (kubectl with its
// credentials). Two runs never overlap: a run
// whose session was cut goes on to its end while a second waits for it,
// and the second then finds the cluster made.
func TestKubeadmScriptsFinishOnTheirMark(t *testing.T) {
	h := newScriptHost(t)
	c := testConfig()
	cl := Cluster{Name: "edge", Endpoint: "172.22.0.50", PodSubnet: DefaultPodSubnet}
	initS, err := InitScript(c, cl, "node-0", "172.22.0.50")
	if err != nil {
		t.Fatal(err)
	}
	j := Join{Token: "abcdef.0123456789abcdef", CACertHash: "sha256:" + strings.Repeat("f", 64)}
	joinS, err := JoinScript(cl, "node-1", "172.22.0.51", false, j)
	if err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		name, script, before, want, calls string
	}{
		{"init", initS, "", "created", initCalls},
		{"init again", initS, "", "exists", ""},
		{"init cut short (admin.conf, no mark)", initS, "rm /etc/bootstick/kubeadm-init.done", "created", "reset " + initCalls},
		{"join", joinS, "rm -rf /etc/kubernetes /etc/bootstick", "joined", "join"},
		{"join again", joinS, "", "joined", ""},
		{"join cut short (kubelet.conf, no mark)", joinS, "rm /etc/bootstick/kubeadm-join.done", "joined", "reset join"},
		// Installed before the marks: kept, never reset, when what it
		// made answers; its files alone prove nothing.
		{"a node joined before the marks", joinS, "rm -rf /etc/bootstick; touch /etc/fake-api-answers", "joined", ""},
		{"kubelet.conf before the marks, no node answers", joinS, "rm -rf /etc/bootstick /etc/fake-api-answers", "joined", "reset join"},
		{"a cluster made before the marks", initS, "rm -rf /etc/bootstick; mkdir -p /etc/kubernetes; touch /etc/kubernetes/admin.conf /etc/fake-api-answers", "exists", ""},
		{"admin.conf before the marks, no API answers", initS, "rm -rf /etc/bootstick /etc/kubernetes /etc/fake-api-answers; mkdir -p /etc/kubernetes; touch /etc/kubernetes/admin.conf", "created", "reset " + initCalls},
		// The last init failing once (a call its loaded API server did
		// not answer in time) runs again on the same cluster.
		{"the rest of init failing once", initS, "rm -rf /etc/kubernetes /etc/bootstick; echo 1 >/etc/fake-init-fails", "created", initCalls + " init[skip preflight,kubelet-start]"},
		// The host that made the cluster is never undone by a join.
		{"a join on the first master", joinS, "rm -f /etc/bootstick/kubeadm-join.done", "joined", ""},
	} {
		if c.before != "" {
			h.run(c.before)
			h.takeCalls()
		}
		if got := h.run(c.script); got != c.want {
			t.Errorf("%s: printed %q, want %q", c.name, got, c.want)
		}
		if got := h.takeCalls(); got != c.calls {
			t.Errorf("%s: kubeadm ran %q, want %q", c.name, got, c.calls)
		}
	}

	// Failing twice, it is undone and the script fails, naming it.
	h.run("rm -rf /etc/kubernetes /etc/bootstick; echo 2 >/etc/fake-init-fails")
	h.takeCalls()
	var out bytes.Buffer
	if err := h.cmd(initS, &out).Run(); err == nil || !strings.Contains(out.String(), "kubeadm init failed twice") {
		t.Errorf("the rest of init failing twice: %v %q, want a failure that says so", err, out.String())
	}
	if got, want := h.takeCalls(), initCalls+" init[skip preflight,kubelet-start] reset"; got != want {
		t.Errorf("the rest of init failing twice: kubeadm ran %q, want %q", got, want)
	}
	if _, err := os.Stat(filepath.Join(h.etc, "kubernetes", "admin.conf")); err == nil {
		t.Errorf("the rest of init failing twice left admin.conf: a half-made cluster not undone")
	}

	// A session cut during kubeadm init, and the BPA's next try.
	h.run("rm -rf /etc/kubernetes /etc/bootstick")
	h.takeCalls()
	ctx, cancel := testctx.New(t, time.Minute)
	defer cancel()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	first := h.cmd(initS, pw, "KUBEADM_BLOCK=1")
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	started, err := os.OpenFile(h.started, os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := started.Read(make([]byte, 1)); err != nil { // kubeadm init runs
		t.Fatal(err)
	}
	// The session is cut: the script's output goes nowhere, and it gets
	// the hangup sshd sends a session's processes.
	pr.Close()
	if err := first.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	var second bytes.Buffer
	next := h.cmd(initS, &second)
	if err := next.Start(); err != nil {
		t.Fatal(err)
	}
	// The second waits on the lock while the first's kubeadm runs.
	for !waitingOnLock(next.Process.Pid) {
		select {
		case <-ctx.Done():
			t.Fatal("the second run never waited for the first")
		case <-time.After(20 * time.Millisecond):
		}
	}
	release, err := os.OpenFile(h.release, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	release.Write([]byte("\n"))
	release.Close()
	first.Wait()
	if err := next.Wait(); err != nil || strings.TrimSpace(second.String()) != "exists" {
		t.Errorf("the next try after a cut session: %v %q, want it to find the cluster the first made", err, second.String())
	}
	if got := h.takeCalls(); got != initCalls {
		t.Errorf("kubeadm ran %q over a cut session and a second try, want one init (%s)", got, initCalls)
	}
	if _, err := os.Stat(filepath.Join(h.etc, "bootstick", "kubeadm-init.done")); err != nil {
		t.Errorf("the run whose session was cut did not go on to its mark: %v", err)
	}
}

// initCalls are init.sh's kubeadm calls: the preflight checks, etcd and
// the API server alone, the kubelet, then the rest of init.
const initCalls = "init/preflight init/certs:all init/kubeconfig:all init/etcd:local init/control-plane:apiserver init/kubelet-start init[skip preflight,kubelet-start]"

// waitingOnLock reports whether the script run pid (unshare, then bash)
// has a flock child, waiting for the lock.
func waitingOnLock(pid int) bool {
	out, _ := exec.Command("pgrep", "-f", "^flock ").Output()
	for _, f := range strings.Fields(string(out)) {
		if anc, _ := exec.Command("ps", "-o", "ppid=", "-p", f).Output(); len(anc) > 0 {
			// flock's parent is bash, which unshare exec'd into (same pid).
			if strings.TrimSpace(string(anc)) == strconv.Itoa(pid) {
				return true
			}
		}
	}
	return false
}
