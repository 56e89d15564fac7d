package qemu

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Accel is how QEMU runs guest code.
type Accel struct {
	Name string   // "kvm" or "tcg"
	Args []string // e.g. -accel tcg -cpu qemu64
	Why  string   // why KVM was not used
}

var (
	detectMu   sync.Mutex
	detectMemo = map[string]Accel{}
)

// Detect returns KVM when /dev/kvm really runs firmware, else TCG. Some
// hosts expose a /dev/kvm (e.g. a nested PVM module) that cannot run a BIOS:
// the probe boots SeaBIOS with KVM and waits for it to report on its debug
// port. The answer is kept for the life of the process.
func Detect(binary string) Accel {
	detectMu.Lock()
	defer detectMu.Unlock()
	if a, ok := detectMemo[binary]; ok {
		return a
	}
	a := probe(binary)
	detectMemo[binary] = a
	return a
}

// tcg's CPU is qemu64 raised to x86-64-v2 with AES-NI, as every server of
// the last decade is. The data disk is AES-XTS (dm-crypt): without AES-NI
// the kernel runs its table-driven AES, emulated instruction by
// instruction, and etcd's writes stall for minutes. AES-NI alone is a CPU
// no one makes: OpenSSL then takes its AES-NI paths, which use SSSE3 too,
// and dies of an illegal instruction (systemd-cryptenroll did).
//
// Its translation cache is TBCacheMiB, twice QEMU's default.
var tcg = []string{"-accel", fmt.Sprintf("tcg,thread=multi,tb-size=%d", TBCacheMiB), "-cpu", "qemu64,+ssse3,+sse4.1,+sse4.2,+popcnt,+aes,+pclmulqdq"}

// TBCacheMiB is the size of a TCG guest's translation cache: the host
// code QEMU translates the guest's into. A guest running etcd, the API
// server, the controller manager and the scheduler filled 621 MB of
// QEMU's default 1 GiB (its "info jit", a 2-vCPU guest on this project's
// machines; the code grows 17.6 times in translation). The cache also
// fills with translations of pages since reused: node-0, installing its
// packages, filled 2 GiB three times in its first 10 minutes. When it is
// full QEMU throws all of it away and translates every hot path again.
// 2 GiB is QEMU's largest on an x86-64 host (its branches reach ±2 GiB).
// The cache is mapped, not reserved: a guest takes only the host memory
// its code needs.
const TBCacheMiB = 2048

// pvmModule is where a kernel shows PVM (kvm_pvm: KVM without hardware
// virtualisation, for nested guests). Its /dev/kvm runs SeaBIOS through
// POST, so the probe below passes, but it stops a Linux kernel's
// decompressor at its first BMI2 instruction ("KVM internal error.
// Suberror: 1", an emulation failure; seen on a machine of this project's
// with nested_pvm=1), and a guest booted with it waits for ever.
var pvmModule = "/sys/module/kvm_pvm"

func probe(binary string) Accel {
	if os.Getenv("BOOTSTICK_QEMU_ACCEL") == "tcg" {
		return Accel{Name: "tcg", Args: tcg, Why: "BOOTSTICK_QEMU_ACCEL=tcg"}
	}
	if _, err := os.Stat(pvmModule); err == nil {
		return Accel{Name: "tcg", Args: tcg, Why: "/dev/kvm is PVM's (" + pvmModule + "), which cannot run a Linux kernel's decompressor"}
	}
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return Accel{Name: "tcg", Args: tcg, Why: fmt.Sprintf("no usable /dev/kvm: %v", err)}
	}
	f.Close()
	dir, err := os.MkdirTemp("", "bootstick-kvm-probe-*")
	if err != nil {
		return Accel{Name: "tcg", Args: tcg, Why: err.Error()}
	}
	defer os.RemoveAll(dir)
	dbg := filepath.Join(dir, "debugcon.log")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "-nodefaults", "-display", "none", "-no-reboot",
		"-accel", "kvm", "-cpu", "host", "-m", "64",
		"-chardev", "file,id=dbg,path="+dbg, "-device", "isa-debugcon,iobase=0x402,chardev=dbg")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return Accel{Name: "tcg", Args: tcg, Why: err.Error()}
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			data, _ := os.ReadFile(dbg)
			// SeaBIOS got through POST to looking for a boot device.
			if strings.Contains(string(data), "No bootable device") || strings.Contains(string(data), "Booting from") {
				_ = cmd.Process.Kill()
				<-done
				return Accel{Name: "kvm", Args: []string{"-accel", "kvm", "-cpu", "host"}}
			}
		case <-done:
			return Accel{Name: "tcg", Args: tcg, Why: "KVM could not run SeaBIOS (the machine stopped)"}
		case <-ctx.Done():
			<-done
			return Accel{Name: "tcg", Args: tcg, Why: "KVM could not run SeaBIOS within 10s"}
		}
	}
}
