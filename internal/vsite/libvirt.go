package vsite

import (
	"bytes"
	"context"
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/bootstick/bootstick/internal/qemu"
)

// libvirtd's configuration: QEMU runs as root with no confinement and no
// cgroups (there may be no systemd), and logs to files.
const qemuConf = `user = "root"
group = "root"
swtpm_user = "root"
swtpm_group = "root"
security_driver = "none"
cgroup_controllers = [ ]
stdio_handler = "file"
`

const libvirtdConf = `unix_sock_group = "root"
unix_sock_rw_perms = "0700"
auth_unix_rw = "none"
`

// libvirtDirs are the system paths libvirtd uses, each bound to a folder
// of the site's own inside libvirtd's mount namespace.
var libvirtDirs = []string{"/etc/libvirt", "/run/libvirt", "/var/lib/libvirt", "/var/log/libvirt", "/var/cache/libvirt"}

func (s *Site) libvirtDir(sys string) string {
	return filepath.Join(s.opts.Dir, "libvirt", filepath.Base(sys))
}

func (s *Site) uri() string {
	return "qemu:///system?socket=" + filepath.Join(s.libvirtDir("/run/libvirt"), "libvirt-sock")
}

func (s *Site) virsh(ctx context.Context, args ...string) ([]byte, error) {
	return run(ctx, append([]string{"virsh", "-q", "-c", s.uri()}, args...)...)
}

// startLibvirt runs libvirtd inside the namespace (its domains' taps land
// on the bridge) and inside a mount namespace where the site's folders
// stand in for libvirt's system paths.
func (s *Site) startLibvirt(ctx context.Context) error {
	script := "set -e\n"
	for _, sys := range libvirtDirs {
		own := s.libvirtDir(sys)
		os.RemoveAll(own)
		if err := os.MkdirAll(own, 0o700); err != nil {
			return fmt.Errorf("libvirt: %w", err)
		}
		if _, err := os.Stat(sys); os.IsNotExist(err) {
			if err := os.MkdirAll(sys, 0o755); err != nil {
				return fmt.Errorf("libvirt: mount point %s: %w", sys, err)
			}
			s.made = append(s.made, sys)
		}
		script += "mount --bind " + shellQuote(own) + " " + sys + "\n"
	}
	etc := s.libvirtDir("/etc/libvirt")
	for name, body := range map[string]string{"qemu.conf": qemuConf, "libvirtd.conf": libvirtdConf} {
		if err := os.WriteFile(filepath.Join(etc, name), []byte(body), 0o600); err != nil {
			return fmt.Errorf("libvirt: %w", err)
		}
	}
	bin, _ := lookPath("libvirtd")
	script += "exec " + bin + " --pid-file " + shellQuote(filepath.Join(s.opts.Dir, "libvirtd.pid")) + "\n"
	d, err := startDaemon("libvirtd", filepath.Join(s.opts.Dir, "libvirtd.log"), nil,
		"ip", "netns", "exec", s.opts.Netns, "unshare", "--mount", "--propagation", "private", "sh", "-c", script)
	if err != nil {
		return err
	}
	s.libvirt = d
	return d.wait(ctx, time.Minute, func() bool {
		_, err := s.virsh(ctx, "version")
		return err == nil
	})
}

// domainXML is a machine that boots from the network first, then its
// disk: the order its BMC rewrites when Ironic sets the boot device.
// The disk is SCSI (virtio-scsi), /dev/sda to the host's OS: the device
// the baremetal-operator's default root device hint names. Every machine
// has an empty CD-ROM drive for virtual media.
//
// A BIOS machine (SeaBIOS, pc) gives its order in <os>. A UEFI machine
// (OVMF from pflash with NVRAM of its own, q35) gives it per device, and
// its NICs have no option ROM: the firmware's own PXE client boots, as a
// real server's does. Extra NICs never boot. A Secure Boot machine's
// loader is OVMF's Secure Boot build, which needs SMM; its variables start
// from the template <nvram> names (Microsoft's keys: Secure Boot on). The
// CPU is x86-64-v2 with AES-NI, as the appliance's is in package qemu:
// under TCG, a control plane's TLS without AES-NI runs AES emulated
// instruction by instruction. Its cores sit in one socket, as a
// one-socket server's do: libvirt's default is a socket per vCPU, and
// Linux trusts no TSC across the sockets of an AMD CPU without an
// invariant TSC (TCG's qemu64), so every clock read went to the
// emulated HPET. The translation cache is the appliance's (package
// qemu's TBCacheMiB).
var domainXML = template.Must(template.New("domain").Funcs(template.FuncMap{"x": xmlText}).Parse(`<domain type='qemu'>
  <name>{{x .Name}}</name>
  <memory unit='MiB'>{{.MemoryMiB}}</memory>
  <vcpu>{{.CPUs}}</vcpu>
  {{- if .UEFI}}
  <os><type arch='x86_64' machine='q35'>hvm</type><loader readonly='yes'{{if .SecureBoot}} secure='yes'{{end}} type='pflash'>{{x .Loader}}</loader><nvram template='{{x .NVRAMTemplate}}'>{{x .NVRAM}}</nvram>{{template "post" .}}</os>
  {{- else}}
  <os><type arch='x86_64' machine='pc'>hvm</type><boot dev='network'/><boot dev='hd'/>{{template "post" .}}</os>
  {{- end}}
  <features><acpi/><apic/>{{if .SecureBoot}}<smm state='on'/>{{end}}<tcg><tb-cache unit='MiB'>{{.TBCacheMiB}}</tb-cache></tcg></features>
  {{- if .ClockSeconds}}
  <clock offset='variable' adjustment='{{.ClockSeconds}}' basis='utc'/>
  {{- else}}
  <clock offset='utc'/>
  {{- end}}
  <cpu mode='custom' match='exact'><model fallback='allow'>qemu64</model><feature policy='require' name='sse4.2'/><feature policy='require' name='sse4.1'/><feature policy='require' name='popcnt'/><feature policy='require' name='ssse3'/><feature policy='require' name='aes'/><feature policy='require' name='pclmuldq'/><topology sockets='1' dies='1' cores='{{.CPUs}}' threads='1'/></cpu>
  <on_poweroff>destroy</on_poweroff><on_reboot>restart</on_reboot><on_crash>destroy</on_crash>
  <devices>
    <emulator>{{x .Emulator}}</emulator>
    <controller type='scsi' model='virtio-scsi'/>
    <disk type='file' device='disk'><driver name='qemu' type='qcow2' cache='unsafe'/><source file='{{x .Disk}}'/><target dev='sda' bus='scsi'/>{{if .UEFI}}<boot order='2'/>{{end}}</disk>
    <disk type='file' device='cdrom'><driver name='qemu' type='raw'/><target dev='{{.CDTarget}}' bus='{{.CDBus}}'/><readonly/></disk>
    <interface type='bridge'><source bridge='{{x .Bridge}}'/><mac address='{{x .MAC}}'/><model type='virtio'/>{{if .UEFI}}<boot order='1'/><rom enabled='no'/>{{end}}</interface>
    {{- range .ExtraMACs}}
    <interface type='bridge'><source bridge='{{x $.Bridge}}'/><mac address='{{x .}}'/><model type='virtio'/><rom enabled='no'/></interface>
    {{- end}}
    <serial type='file'><source path='{{x .Serial}}' append='on'/><target port='0'/></serial>
    <console type='file'><source path='{{x .Serial}}' append='on'/><target type='serial' port='0'/></console>
    <rng model='virtio'><backend model='random'>/dev/urandom</backend></rng>
  </devices>
</domain>
{{- define "post"}}{{if .POSTMillis}}<bootmenu enable='yes' timeout='{{.POSTMillis}}'/>{{end}}{{end}}`))

func xmlText(s string) (string, error) {
	var b bytes.Buffer
	err := xml.EscapeText(&b, []byte(s))
	return b.String(), err
}

// define makes the machine's blank disk and defines it, powered off.
func (s *Site) define(ctx context.Context, m Machine) error {
	disk := s.disk(m.Name)
	os.Remove(disk)
	os.Remove(s.SerialLog(m.Name))
	if _, err := run(ctx, "qemu-img", "create", "-q", "-f", "qcow2", disk, strconv.Itoa(m.DiskGiB)+"G"); err != nil {
		return fmt.Errorf("machine %s: disk: %w", m.Name, err)
	}
	emulator, err := s.emulator()
	if err != nil {
		return fmt.Errorf("machine %s: %w", m.Name, err)
	}
	x := s.domainVarsOf(m, emulator)
	if x.UEFI {
		if err := resetVars(x.NVRAMTemplate, x.NVRAM); err != nil {
			return fmt.Errorf("machine %s: UEFI variables (Debian package ovmf): %w", m.Name, err)
		}
	}
	var b bytes.Buffer
	if err := domainXML.Execute(&b, x); err != nil {
		return fmt.Errorf("machine %s: %w", m.Name, err)
	}
	path := filepath.Join(s.opts.Dir, m.Name+".xml")
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		return fmt.Errorf("machine %s: %w", m.Name, err)
	}
	if _, err := s.virsh(ctx, "define", path); err != nil {
		return fmt.Errorf("machine %s: %w", m.Name, err)
	}
	return nil
}

// defaultMachineNice is the machines' niceness when Options names none.
// A real server has CPUs of its own; here the machines share this
// machine's with what they test (the bootstrap machine, Ironic, the
// baremetal-operator, vbmcd). Under load, a machine that boots at full
// speed while Ironic waits for CPU to move it to its next state races
// Ironic, which a real site never sees.
const defaultMachineNice = 5

// emulator is the machines' QEMU: a script in Dir that runs Debian's at
// Options.MachineNice (libvirt runs it for its capabilities too).
//
// Niceness alone does not make a machine yield. libvirt daemonizes each
// QEMU into a session of its own, and with the kernel's autogroups
// (sched_autogroup_enabled, on by default in Debian) the scheduler first
// shares the CPU equally between sessions and only then, inside each,
// by niceness. A machine at niceness 19 then took twice the CPU of a
// bootstrap machine's QEMU sharing the test's session with go test. So
// a QEMU in an autogroup other than its parent's (a daemonized machine)
// also sets its group's niceness (/proc/self/autogroup, sched(7)); one
// in its parent's (libvirt's capability probe) leaves the group alone.
func (s *Site) emulator() (string, error) {
	qemu, err := lookPath("qemu-system-x86_64")
	if err != nil {
		return "", err
	}
	path := filepath.Join(s.absDir(), "qemu-system-x86_64")
	script := fmt.Sprintf(`#!/bin/sh
read -r own _ 2>/dev/null < /proc/$$/autogroup
read -r parent _ 2>/dev/null < /proc/$PPID/autogroup
if [ "$own" != "$parent" ]; then echo %d > /proc/$$/autogroup; fi
exec nice -n %d %s "$@"
`, s.opts.MachineNice, s.opts.MachineNice, shellQuote(qemu))
	if err := os.WriteFile(path, []byte(script), 0o700); err != nil {
		return "", fmt.Errorf("QEMU at niceness %d: %w", s.opts.MachineNice, err)
	}
	return path, nil
}

// domainVars fill domainXML.
type domainVars struct {
	Machine
	Emulator, Disk, Bridge, Serial string
	UEFI, SecureBoot               bool
	Loader, NVRAM, NVRAMTemplate   string // UEFI only
	ClockSeconds                   int64  // ClockAhead
	POSTMillis                     int64  // POST: the boot menu's wait
	CDTarget, CDBus                string // hdc on IDE (pc), sdb on SATA (q35)
	TBCacheMiB                     int    // TCG's translation cache
}

// domainVarsOf is what domainXML needs for m, its files in Dir.
func (s *Site) domainVarsOf(m Machine, emulator string) domainVars {
	x := domainVars{Machine: m, Emulator: emulator, Disk: s.disk(m.Name), Bridge: bridge, Serial: s.SerialLog(m.Name),
		UEFI: m.Firmware == FirmwareUEFI || m.Firmware == FirmwareUEFISecureBoot, SecureBoot: m.Firmware == FirmwareUEFISecureBoot,
		CDTarget: "hdc", CDBus: "ide", ClockSeconds: int64(m.ClockAhead / time.Second), POSTMillis: m.POST.Milliseconds(),
		TBCacheMiB: qemu.TBCacheMiB}
	if x.UEFI {
		x.Loader, x.NVRAMTemplate, x.NVRAM, x.CDTarget, x.CDBus = ovmfCode, ovmfVars, filepath.Join(s.opts.Dir, m.Name+".OVMF_VARS.fd"), "sdb", "sata"
	}
	if x.SecureBoot {
		x.Loader, x.NVRAMTemplate = ovmfSecureBootCode, ovmfSecureBootVars
	}
	return x
}

func (s *Site) disk(name string) string { return filepath.Join(s.opts.Dir, name+".qcow2") }

// Debian's OVMF (package ovmf): the code, read-only, and the template of
// each UEFI machine's own variables; and its Secure Boot build, whose
// machines' variables start with Microsoft's keys enrolled and Secure Boot
// on, or with no keys (Secure Boot off, setup mode).
const (
	ovmfCode           = "/usr/share/OVMF/OVMF_CODE_4M.fd"
	ovmfVars           = "/usr/share/OVMF/OVMF_VARS_4M.fd"
	ovmfSecureBootCode = "/usr/share/OVMF/OVMF_CODE_4M.secboot.fd"
	ovmfSecureBootVars = "/usr/share/OVMF/OVMF_VARS_4M.ms.fd"
)

// resetVars makes a machine's variables file afresh from template, and
// records beside it (file.template) which template it was made from: a
// Secure Boot change applies when the machine next starts, by making the
// file again from the template its definition names (libvirtMachine).
func resetVars(template, file string) error {
	data, err := os.ReadFile(template)
	if err != nil {
		return err
	}
	if err := os.WriteFile(file, data, 0o600); err != nil {
		return err
	}
	return os.WriteFile(file+".template", []byte(template), 0o600)
}

// varsTemplate is the template the machine's variables file was made
// from ("" when unknown).
func varsTemplate(file string) string {
	data, _ := os.ReadFile(file + ".template")
	return string(data)
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
