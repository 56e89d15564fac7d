package netns

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// newNamespace makes a network namespace of the test's own (named as
// make test's clearing knows the tests' namespaces) and removes it after.
func newNamespace(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("making a network namespace needs root")
	}
	name := fmt.Sprintf("bootstick-netns-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v\n%s", name, err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	return filepath.Join("/run/netns", name)
}

// nsOf names the namespace at path (a /proc ns link or a bound
// /run/netns file) by its nsfs inode.
func nsOf(t *testing.T, path string) string {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("net:[%d]", st.Ino)
}

// TestDoLeavesNoThreadInside: after many calls, every thread of this
// process (the main thread, which `ip netns pids` reads, above all) is
// in the namespace it started in, so that clearing the namespace's
// processes never finds this one; and what fn made (a listening socket)
// lives inside the namespace, which has no NIC but lo.
func TestDoLeavesNoThreadInside(t *testing.T) {
	path := newNamespace(t)
	own := nsOf(t, "/proc/self/ns/net")
	inside := nsOf(t, path)
	if own == inside {
		t.Fatalf("the new namespace is this process's own (%s)", own)
	}
	for i := range 200 {
		var seen string
		var ifaces []net.Interface
		if err := Do(path, func() error {
			var err error
			seen = nsOf(t, "/proc/thread-self/ns/net")
			ifaces, err = net.Interfaces()
			return err
		}); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if seen != inside {
			t.Fatalf("call %d: fn ran in %s, want the namespace %s", i, seen, inside)
		}
		if len(ifaces) != 1 || ifaces[0].Name != "lo" {
			t.Fatalf("call %d: fn saw NICs %v, want the new namespace's lo only", i, ifaces)
		}
	}
	tasks, err := filepath.Glob("/proc/self/task/*/ns/net")
	if err != nil || len(tasks) == 0 {
		t.Fatalf("this process's threads: %v", err)
	}
	for _, task := range tasks {
		if got := nsOf(t, task); got != own {
			t.Errorf("thread %s is in %s after Do returned, want %s", filepath.Base(filepath.Dir(filepath.Dir(task))), got, own)
		}
	}
	if !t.Failed() {
		t.Logf("200 calls ran inside %s; all %d threads are back in %s", inside, len(tasks), own)
	}
}

func TestDoMissingNamespace(t *testing.T) {
	err := Do("/run/netns/bootstick-no-such-namespace", func() error {
		t.Error("fn ran without its namespace")
		return nil
	})
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("got %v, want an error naming the missing namespace", err)
	}
}
