// Package qemu starts a virtual machine that boots an image the way a real
// bootstrap machine would: as a CD or a USB disk, under BIOS (SeaBIOS) or
// UEFI (OVMF), with an empty data disk and either no network or a
// restricted user network with one forwarded port. The serial console goes
// to a log file that tests wait on.
package qemu

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/bootstick/bootstick/internal/command"
)

// Firmware is what the machine boots with.
type Firmware string

// Media is how the image is attached.
type Media string

const (
	BIOS Firmware = "bios"
	UEFI Firmware = "uefi"
	// UEFISecureBoot is OVMF built for Secure Boot, on q35 with SMM, with
	// Microsoft's keys enrolled and Secure Boot on, as a server ships:
	// it starts only loaders signed by Microsoft's UEFI CA (shim).
	UEFISecureBoot Firmware = "uefi-secureboot"
	CD             Media    = "cd"
	USB            Media    = "usb"
)

// Debian's OVMF (package ovmf).
const (
	DefaultOVMFCode = "/usr/share/OVMF/OVMF_CODE_4M.fd"
	DefaultOVMFVars = "/usr/share/OVMF/OVMF_VARS_4M.fd"
	// SecureBootOVMFCode and SecureBootOVMFVars are UEFISecureBoot's.
	SecureBootOVMFCode = "/usr/share/OVMF/OVMF_CODE_4M.secboot.fd"
	SecureBootOVMFVars = "/usr/share/OVMF/OVMF_VARS_4M.ms.fd"
)

// Options describe a machine.
type Options struct {
	Image    string // the ISO
	Media    Media  // CD (default) or USB
	Firmware Firmware
	// Dir holds the serial log, the firmware variables and the data disk;
	// required.
	Dir string
	// MemoryMiB defaults to 2048, CPUs to 2.
	MemoryMiB, CPUs int
	// DataDisk is the size of an empty virtio data disk; 0 means none.
	DataDisk int64
	// DataDiskFile, when set, is the data disk's file, kept across
	// machines: it is created sparse (DataDisk bytes) only when missing,
	// so a second machine boots with what the first one wrote (a reboot).
	// Empty means a fresh Dir/data.img.
	DataDiskFile string
	// HostPort, when set, turns on a restricted user network (no way out)
	// with 127.0.0.1:HostPort forwarded to GuestPort in the guest.
	HostPort, GuestPort int
	// Binary defaults to qemu-system-x86_64; OVMFCode/OVMFVars to Debian's
	// (for UEFISecureBoot, its Secure Boot build and Microsoft's keys).
	Binary, OVMFCode, OVMFVars string

	// Disk, instead of Image, boots a disk image (qcow2) as the machine's
	// first virtio disk (a compute host).
	Disk string
	// ProvisioningTap, with HostPort, puts the provisioning NIC on this
	// open tap device (a virtual site's bridge, vsite.Site.Tap) instead of
	// an empty hub.
	ProvisioningTap *os.File
	// StickOverlay, when set, keeps what the machine writes to its USB
	// stick in this qcow2 file over Image (made when missing), so the next
	// machine with it finds it there; else the stick's writes are lost
	// when the machine stops.
	StickOverlay string
	// TPMState, when set, gives the machine a TPM 2.0: a software TPM
	// (swtpm) whose state lives in this folder, so a second machine with
	// the same folder has the same TPM, and one with another folder a
	// different TPM.
	TPMState string
	// Reboots lets the guest's own reboot (its kernel's panic=10 after a
	// panic) restart the machine, as a server's does. Without it QEMU
	// runs with -no-reboot, and any reboot stops the machine.
	Reboots bool
}

// VM is a running machine.
type VM struct {
	SerialLog string
	Accel     Accel
	cmd       *exec.Cmd
	qmp       string
	done      chan struct{}
	waitErr   error
	stderr    *strings.Builder
}

// Start boots a machine. Stop it with Shutdown or Kill.
func Start(ctx context.Context, o Options) (*VM, error) {
	if (o.Image == "" && o.Disk == "") || o.Dir == "" {
		return nil, fmt.Errorf("qemu: Image (or Disk) and Dir are required")
	}
	for _, f := range []string{o.Image, o.Disk} {
		if f == "" {
			continue
		}
		if _, err := os.Stat(f); err != nil {
			return nil, fmt.Errorf("qemu: %w", err)
		}
	}
	if o.Media == "" {
		o.Media = CD
	}
	if o.Firmware == "" {
		o.Firmware = BIOS
	}
	if o.MemoryMiB == 0 {
		o.MemoryMiB = 2048
	}
	if o.CPUs == 0 {
		o.CPUs = 2
	}
	if o.Binary == "" {
		o.Binary = "qemu-system-x86_64"
	}
	code, vars := DefaultOVMFCode, DefaultOVMFVars
	if o.Firmware == UEFISecureBoot {
		code, vars = SecureBootOVMFCode, SecureBootOVMFVars
	}
	if o.OVMFCode == "" {
		o.OVMFCode = code
	}
	if o.OVMFVars == "" {
		o.OVMFVars = vars
	}
	if _, err := exec.LookPath(o.Binary); err != nil {
		return nil, fmt.Errorf("qemu: %s is missing (apt-get install qemu-system-x86): %w", o.Binary, err)
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("qemu: %w", err)
	}
	accel := Detect(o.Binary)
	vm := &VM{
		SerialLog: filepath.Join(o.Dir, "serial.log"),
		Accel:     accel,
		qmp:       filepath.Join(o.Dir, "qmp.sock"),
		done:      make(chan struct{}),
		stderr:    &strings.Builder{},
	}
	_ = os.Remove(vm.SerialLog)
	_ = os.Remove(vm.qmp)

	args := []string{
		"-name", "bootstick-test", "-nodefaults", "-display", "none", "-vga", "std",
		"-m", strconv.Itoa(o.MemoryMiB), "-smp", strconv.Itoa(o.CPUs),
		"-serial", "file:" + vm.SerialLog,
		"-qmp", "unix:" + vm.qmp + ",server=on,wait=off",
	}
	if !o.Reboots {
		args = append(args, "-no-reboot")
	}
	args = append(args, accel.Args...)

	switch o.Firmware {
	case BIOS:
	case UEFI, UEFISecureBoot:
		vars := filepath.Join(o.Dir, "OVMF_VARS.fd")
		if err := copyFile(o.OVMFVars, vars); err != nil {
			return nil, fmt.Errorf("qemu: copying UEFI variables (apt-get install ovmf): %w", err)
		}
		if o.Firmware == UEFISecureBoot {
			// The Secure Boot build keeps its variables in SMM, which
			// q35 has, and only SMM may write the flash.
			args = append(args, "-machine", "q35,smm=on", "-global", "driver=cfi.pflash01,property=secure,value=on")
		}
		args = append(args,
			"-drive", "if=pflash,format=raw,unit=0,readonly=on,file="+o.OVMFCode,
			"-drive", "if=pflash,format=raw,unit=1,file="+vars)
	default:
		return nil, fmt.Errorf("qemu: unknown firmware %q (bios, uefi or uefi-secureboot)", o.Firmware)
	}

	switch {
	case o.Disk != "":
		args = append(args, "-drive", "if=virtio,format=qcow2,file="+o.Disk)
	case o.Media == CD:
		args = append(args,
			"-drive", "if=none,id=stick,media=cdrom,readonly=on,format=raw,file="+o.Image,
			"-device", "ide-cd,drive=stick,bootindex=0")
	case o.Media == USB:
		drive := "if=none,id=stick,format=raw,snapshot=on,file=" + o.Image
		if o.StickOverlay != "" {
			if err := overlay(o.Image, o.StickOverlay); err != nil {
				return nil, err
			}
			drive = "if=none,id=stick,format=qcow2,file=" + o.StickOverlay
		}
		args = append(args,
			"-device", "usb-ehci,id=ehci",
			"-drive", drive,
			"-device", "usb-storage,bus=ehci.0,drive=stick,removable=on,bootindex=0")
	default:
		return nil, fmt.Errorf("qemu: unknown media %q (cd or usb)", o.Media)
	}

	if o.DataDisk > 0 || o.DataDiskFile != "" {
		data, err := dataDisk(o)
		if err != nil {
			return nil, fmt.Errorf("qemu: data disk: %w", err)
		}
		args = append(args, "-drive", "if=virtio,format=raw,file="+data)
	}

	if o.HostPort != 0 {
		// Fixed PCI slots and MACs: the guest names the NICs NICName and
		// ProvisioningNICName in every boot mode (a USB controller would
		// shift a free slot). The second NIC is the provisioning network:
		// a virtual site's tap, or a switch with nothing else on it, so
		// nothing answers there. That switch is a hub with a second port
		// that has no peer: the hub takes every frame and the port drops
		// it. A hub with the NIC's port alone never takes a frame, and
		// the guest's transmit queue then stalls for good (its kernel logs
		// a NETDEV WATCHDOG timeout every 5 s).
		args = append(args,
			"-netdev", fmt.Sprintf("user,id=net0,restrict=on,hostfwd=tcp:127.0.0.1:%d-:%d", o.HostPort, o.GuestPort),
			"-device", fmt.Sprintf("virtio-net-pci,netdev=net0,addr=%#x,mac=%s", nicSlot, NICMAC),
			"-device", fmt.Sprintf("virtio-net-pci,netdev=net1,addr=%#x,mac=%s", nicSlot+1, ProvisioningNICMAC))
		if o.ProvisioningTap != nil {
			args = append(args, "-netdev", "tap,id=net1,fd=3") // ExtraFiles[0]
		} else {
			args = append(args, "-netdev", "hubport,id=net1,hubid=1", "-netdev", "hubport,id=drop1,hubid=1")
		}
	} else {
		args = append(args, "-nic", "none")
	}

	if o.TPMState != "" {
		sock, err := startTPM(o.TPMState, o.Dir)
		if err != nil {
			return nil, err
		}
		args = append(args,
			"-chardev", "socket,id=chrtpm,path="+sock,
			"-tpmdev", "emulator,id=tpm0,chardev=chrtpm",
			"-device", "tpm-tis,tpmdev=tpm0")
	}

	vm.cmd = exec.Command(o.Binary, args...)
	vm.cmd.Stderr = vm.stderr
	if o.HostPort != 0 && o.ProvisioningTap != nil {
		vm.cmd.ExtraFiles = []*os.File{o.ProvisioningTap}
	}
	vm.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := vm.cmd.Start(); err != nil {
		return nil, fmt.Errorf("qemu: %w", err)
	}
	go func() {
		vm.waitErr = vm.cmd.Wait()
		close(vm.done)
	}()
	// Stop the machine when the caller's context ends.
	go func() {
		select {
		case <-ctx.Done():
			vm.Kill()
		case <-vm.done:
		}
	}()
	return vm, nil
}

// The restricted user network's NIC: its PCI slot gives the guest's
// predictable name (ens16); slirp's fixed guest address, prefix and
// gateway. The provisioning NIC is in the next slot (ens17).
const (
	nicSlot             = 0x10
	NICName             = "ens16"
	NICMAC              = "52:54:00:b0:07:01"
	ProvisioningNICName = "ens17"
	ProvisioningNICMAC  = "52:54:00:b0:07:02"
	GuestAddress        = "10.0.2.15"
	GuestPrefix         = 24
	GuestGateway        = "10.0.2.2"
)

// overlay makes a qcow2 file over image at path, unless there is one.
func overlay(image, path string) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	abs, err := filepath.Abs(image)
	if err != nil {
		return fmt.Errorf("qemu: %w", err)
	}
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", abs, path).CombinedOutput(); err != nil {
		return fmt.Errorf("qemu: the stick's overlay (apt-get install qemu-utils): %v: %s", err, out)
	}
	return nil
}

// startTPM starts a software TPM 2.0 with its state in state, and returns
// its control socket for QEMU. The socket is made here and handed to swtpm
// already listening, so QEMU never races swtpm's start. swtpm ends when
// QEMU closes the socket (--terminate), or with us.
func startTPM(state, dir string) (string, error) {
	if _, err := exec.LookPath("swtpm"); err != nil {
		return "", fmt.Errorf("qemu: swtpm is missing (apt-get install swtpm): %w", err)
	}
	if err := os.MkdirAll(state, 0o700); err != nil {
		return "", fmt.Errorf("qemu: TPM state: %w", err)
	}
	sock := filepath.Join(dir, "swtpm.sock")
	_ = os.Remove(sock)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		return "", fmt.Errorf("qemu: TPM socket: %w", err)
	}
	l.SetUnlinkOnClose(false)
	f, err := l.File()
	l.Close() // f holds its own descriptor of the listening socket
	if err != nil {
		return "", fmt.Errorf("qemu: TPM socket: %w", err)
	}
	defer f.Close()
	cmd := exec.Command("swtpm", "socket", "--tpm2", "--tpmstate", "dir="+state,
		"--ctrl", "type=unixio,fd=3", "--terminate",
		"--log", "file="+filepath.Join(dir, "swtpm.log"))
	cmd.ExtraFiles = []*os.File{f}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("qemu: swtpm: %w", err)
	}
	go cmd.Wait()
	return sock, nil
}

// dataDisk returns the data disk's file: a fresh sparse Dir/data.img, or
// DataDiskFile, created only when missing.
func dataDisk(o Options) (string, error) {
	path := o.DataDiskFile
	if path == "" {
		path = filepath.Join(o.Dir, "data.img")
		_ = os.Remove(path)
	} else if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if o.DataDisk <= 0 {
		return "", fmt.Errorf("%s is missing and DataDisk gives no size to create it", path)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return "", err
	}
	err = f.Truncate(o.DataDisk)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
		return "", err
	}
	return path, nil
}

// Args is the command line the machine was started with (for logs).
func (vm *VM) Args() []string { return vm.cmd.Args }

// WaitSerial waits until the serial log matches re and returns the match.
// It fails when ctx ends or the machine stops first, with the log's tail.
func (vm *VM) WaitSerial(ctx context.Context, re *regexp.Regexp) (string, error) {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		data, _ := os.ReadFile(vm.SerialLog)
		if m := re.Find(data); m != nil {
			return string(m), nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("qemu: waiting for %q on the serial console: %w\nlast output:\n%s", re, ctx.Err(), command.Tail(string(data), 25))
		case <-vm.done:
			data, _ = os.ReadFile(vm.SerialLog)
			if m := re.Find(data); m != nil {
				return string(m), nil
			}
			return "", fmt.Errorf("qemu: stopped (%v) before %q showed on the serial console: %s\nlast output:\n%s", vm.waitErr, re, strings.TrimSpace(vm.stderr.String()), command.Tail(string(data), 25))
		case <-tick.C:
		}
	}
}

// Shutdown asks the guest to power off (ACPI) and waits up to timeout, then
// kills the machine.
func (vm *VM) Shutdown(timeout time.Duration) error {
	select {
	case <-vm.done:
		return nil
	default:
	}
	err := vm.qmpCommand("system_powerdown")
	if err == nil {
		select {
		case <-vm.done:
			return nil
		case <-time.After(timeout):
			err = fmt.Errorf("guest did not power off in %s", timeout)
		}
	}
	vm.Kill()
	return fmt.Errorf("qemu: clean shutdown failed, killed: %w", err)
}

// Kill stops the machine at once and waits for it to exit.
func (vm *VM) Kill() {
	select {
	case <-vm.done:
		return
	default:
	}
	_ = vm.qmpCommand("quit")
	select {
	case <-vm.done:
		return
	case <-time.After(3 * time.Second):
	}
	_ = vm.cmd.Process.Kill()
	<-vm.done
}

// ExitStatus says how QEMU ended (its wait status and stderr), or "" while
// it runs.
func (vm *VM) ExitStatus() string {
	select {
	case <-vm.done:
	default:
		return ""
	}
	status := "exit status 0"
	if vm.waitErr != nil {
		status = vm.waitErr.Error()
	}
	if e := strings.TrimSpace(vm.stderr.String()); e != "" {
		status += ": " + e
	}
	return status
}

// Done is closed when the machine has exited.
func (vm *VM) Done() <-chan struct{} { return vm.done }

func (vm *VM) qmpCommand(command string) error {
	c, err := net.DialTimeout("unix", vm.qmp, 2*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	if _, err := r.ReadBytes('\n'); err != nil { // greeting
		return err
	}
	for _, cmd := range []string{"qmp_capabilities", command} {
		b, _ := json.Marshal(map[string]string{"execute": cmd})
		if _, err := c.Write(append(b, '\n')); err != nil {
			return err
		}
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				if cmd == "quit" && errors.Is(err, io.EOF) {
					return nil
				}
				return err
			}
			var resp map[string]json.RawMessage
			if json.Unmarshal(line, &resp) != nil {
				continue
			}
			if e, ok := resp["error"]; ok {
				return fmt.Errorf("qmp %s: %s", cmd, e)
			}
			if _, ok := resp["return"]; ok {
				break
			}
		}
	}
	return nil
}

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
var tcg = []string{"-accel", "tcg,thread=multi", "-cpu", "qemu64,+ssse3,+sse4.1,+sse4.2,+popcnt,+aes,+pclmulqdq"}

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

func copyFile(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, data, 0o644)
}

// terminalEscapes are the control sequences firmware and a Linux console
// write to a serial port: CSI sequences (colour, cursor), character-set
// selection and reset.
var terminalEscapes = regexp.MustCompile(`\x1b\[[0-9;?=]*[A-Za-z]|\x1b[()][A-Z0-9]|\x1bc`)

// ConsoleText is a serial console's text without its terminal escapes.
func ConsoleText(b []byte) string {
	return terminalEscapes.ReplaceAllString(string(b), "")
}
