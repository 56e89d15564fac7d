// Package qemu starts a virtual machine that boots an image the way a real
// bootstrap machine would: as a CD or a USB disk, under BIOS (SeaBIOS) or
// UEFI (OVMF), with an empty data disk and either no network or a
// restricted user network with one forwarded port. The serial console goes
// to a log file that tests wait on.
package qemu

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
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
		"-m", strconv.Itoa(o.MemoryMiB), "-smp", fmt.Sprintf("%d,sockets=1,cores=%[1]d,threads=1", o.CPUs),
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
