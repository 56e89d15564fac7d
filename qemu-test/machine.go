package qemutest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/bootstick/bootstick/internal/qemu"
)

// Mode is how the stick boots.
type Mode struct {
	Firmware qemu.Firmware
	Media    qemu.Media
}

func (m Mode) String() string { return string(m.Firmware) + "-" + string(m.Media) }

// Modes are the four ways a bootstrap machine boots the stick.
var Modes = []Mode{{qemu.BIOS, qemu.CD}, {qemu.UEFI, qemu.CD}, {qemu.BIOS, qemu.USB}, {qemu.UEFI, qemu.USB}}

// Guest resources: TCG runs each vCPU on a host thread, so two vCPUs are
// two cores' worth; the control plane, etcd and the images want the RAM.
const (
	GuestCPUs      = 2
	GuestMemoryMiB = 5120
)

// HostKeys pins the guest's SSH host key: the first machine on a data disk
// records it, later ones (the reboots) must show the same.
type HostKeys struct {
	mu  sync.Mutex
	key []byte
}

func (h *HostKeys) check(_ string, _ net.Addr, key ssh.PublicKey) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.key == nil {
		h.key = key.Marshal()
		return nil
	}
	if !bytes.Equal(h.key, key.Marshal()) {
		return errors.New("the guest's SSH host key changed between boots of one data disk")
	}
	return nil
}

// BootOptions describe one power-on.
type BootOptions struct {
	Mode Mode
	// Dir holds this boot's serial log and firmware variables.
	Dir string
	// DataDisk is the data disk's file: created empty when missing, kept
	// when it exists (a reboot).
	DataDisk string
	HostKeys *HostKeys
	// ProvisioningTap, when set, is the provisioning NIC's tap (a virtual
	// site's bridge); else that NIC is alone.
	ProvisioningTap *os.File
	// TPMState is the folder of the machine's software TPM 2.0: one
	// folder is one TPM, kept across boots; empty is no TPM.
	TPMState string
	// StickOverlay keeps what the machine writes to its USB stick for
	// the next boot (qemu.Options.StickOverlay).
	StickOverlay string
}

// Machine is one power-on of the stick.
type Machine struct {
	Mode    Mode
	VM      *qemu.VM
	Console *Console
	PowerOn time.Time

	port   int
	signer ssh.Signer
	keys   *HostKeys

	mu     sync.Mutex
	client *ssh.Client
}

// Boot powers a machine on: the stick as a CD or USB disk, the data disk,
// and a restricted user network (no route out) whose only way in is SSH
// on a loopback port.
func Boot(ctx context.Context, s *Stick, o BootOptions) (*Machine, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	if o.HostKeys == nil {
		o.HostKeys = &HostKeys{}
	}
	start := time.Now()
	vm, err := qemu.Start(ctx, qemu.Options{
		Image: s.ISO, Media: o.Mode.Media, Firmware: o.Mode.Firmware, Dir: o.Dir,
		MemoryMiB: GuestMemoryMiB, CPUs: GuestCPUs,
		DataDisk: DataDiskSize, DataDiskFile: o.DataDisk,
		HostPort: port, GuestPort: 22, ProvisioningTap: o.ProvisioningTap, TPMState: o.TPMState, StickOverlay: o.StickOverlay,
		// A panic reboots the machine (the stick's panic=10), as it
		// does a server; Run's cleanup judges each panic (Panics).
		Reboots: true,
	})
	if err != nil {
		return nil, err
	}
	return &Machine{Mode: o.Mode, VM: vm, Console: FollowConsole(vm.SerialLog, start), PowerOn: start,
		port: port, signer: s.Signer, keys: o.HostKeys}, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// SSHPort is the loopback port forwarded to the guest's sshd.
func (m *Machine) SSHPort() int { return m.port }

// Since is the time from power-on.
func (m *Machine) Since() time.Duration { return time.Since(m.PowerOn) }

// WaitConsole waits up to timeout for a console line matching re.
func (m *Machine) WaitConsole(ctx context.Context, re *regexp.Regexp, timeout time.Duration) (Line, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	l, err := m.Console.Wait(ctx, re, 0, m.VM.Done())
	if err != nil {
		return l, m.offWhy(err)
	}
	return l, nil
}

// offWhy adds why the machine stopped to err, when it has: QEMU's exit
// status and the guest's last words, so that a failure's one-line summary
// (all that CI's excerpt may keep) says whether the guest panicked or
// powered off. A panic reboots the guest 10 s later (the stick's panic=10;
// once kubelet runs, any oops panics: kernel.panic_on_oops=1), and the
// machine goes on (qemu.Options.Reboots): Panics lists them.
func (m *Machine) offWhy(err error) error {
	select {
	case <-m.VM.Done():
	default:
		return err
	}
	return fmt.Errorf("%w (QEMU: %s; %s)", err, m.VM.ExitStatus(), lastWords(m.Console.Lines()))
}

// kernelFault matches a kernel's lines on a fault, a warning with a
// trace, a NIC's stalled transmit queue or running out of memory: what
// a healthy appliance's kernel log never holds.
var kernelFault = regexp.MustCompile(`Kernel panic|Oops|BUG:|general protection fault|invalid opcode|WARNING: CPU|NETDEV WATCHDOG|Out of memory`)

// kernelTrouble adds to kernelFault the kernel's lines on its way down.
var kernelTrouble = regexp.MustCompile(kernelFault.String() + `|RIP: |Rebooting in|reboot: |Killed process|watchdog: `)

// lastWords is what the guest said last: its kernel's lines on trouble
// (the first 8), else its last 5 console lines.
func lastWords(lines []Line) string {
	var trouble []string
	for _, l := range lines {
		if kernelTrouble.MatchString(l.Text) {
			trouble = append(trouble, fmt.Sprintf("%.1fs %s", l.At.Seconds(), l.Text))
		}
	}
	if len(trouble) > 0 {
		return "the kernel said: " + strings.Join(trouble[:min(len(trouble), 8)], " | ")
	}
	if len(lines) == 0 {
		return "the console stayed silent"
	}
	var last []string
	for _, l := range lines[max(0, len(lines)-5):] {
		last = append(last, fmt.Sprintf("%.1fs %s", l.At.Seconds(), l.Text))
	}
	return "its last console lines: " + strings.Join(last, " | ")
}

// Panic is a kernel panic on the machine's console, and the oops that
// led to it.
type Panic struct {
	At   time.Duration
	Oops string // the oops line ("Oops: int3: 0000 [#1] ..."), or ""
	Text string // the panic line
	// TCGRace: the oops is an int3 trap at a place of the kernel's code
	// that no longer holds an int3 (the oops's Code line). The kernel
	// patches its own code at run time (static keys) by writing an int3
	// first, and under QEMU's multi-threaded TCG another vCPU can still
	// run its stale translation of that int3 after the patch is done: an
	// emulator's race, which a server's CPU does not have.
	TCGRace bool
}

func (p Panic) String() string {
	oops := p.Oops
	if oops == "" {
		oops = "no oops line"
	}
	return fmt.Sprintf("%s after power-on: %s (%s)", p.At.Round(time.Second), p.Text, oops)
}

var (
	panicLine = regexp.MustCompile(`Kernel panic - not syncing`)
	oopsLine  = regexp.MustCompile(`Oops: .*`)
	codeLine  = regexp.MustCompile(`\] Code: (.*)$`)
)

// Panics lists the kernel panics the machine's console shows, each with
// the oops before it.
func (m *Machine) Panics() []Panic { return findPanics(m.Console.Lines()) }

func findPanics(lines []Line) []Panic {
	var panics []Panic
	oops, code := "", ""
	for _, l := range lines {
		switch {
		case oopsLine.MatchString(l.Text) && !panicLine.MatchString(l.Text):
			oops, code = oopsLine.FindString(l.Text), ""
		case code == "" && oops != "" && codeLine.MatchString(l.Text):
			code = codeLine.FindStringSubmatch(l.Text)[1]
		case panicLine.MatchString(l.Text):
			p := Panic{At: l.At, Oops: oops, Text: strings.TrimSpace(l.Text)}
			p.TCGRace = strings.HasPrefix(oops, "Oops: int3") && int3Gone(code)
			panics = append(panics, p)
			oops, code = "", ""
		}
	}
	return panics
}

// int3Gone: in an oops's Code line, the byte marked <..> is at the
// instruction pointer, which an int3 trap leaves one byte past the int3
// (0xcc). The int3 is gone when the byte before the mark is not cc.
func int3Gone(code string) bool {
	f := strings.Fields(code)
	for i, b := range f {
		if strings.HasPrefix(b, "<") {
			return i > 0 && f[i-1] != "cc"
		}
	}
	return false
}

// Connect logs in as root over SSH, retrying until timeout: sshd and the
// guest's address come up some time after power-on.
func (m *Machine) Connect(ctx context.Context, timeout time.Duration) (*ssh.Client, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.client != nil {
		if _, _, err := m.client.SendRequest("keepalive@bootstick", true, nil); err == nil {
			return m.client, nil
		}
		m.client.Close()
		m.client = nil
	}
	cfg := &ssh.ClientConfig{
		User:            "root",
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(m.signer)},
		HostKeyCallback: m.keys.check,
		Timeout:         15 * time.Second,
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(m.port))
	deadline := time.Now().Add(timeout)
	var last error
	for {
		c, err := dialSSH(ctx, addr, cfg)
		if err == nil {
			m.client = c
			return c, nil
		}
		last = err
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("logging in as root over SSH (127.0.0.1:%d forwarded to the guest's port 22) for %s: %w", m.port, timeout, last)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("logging in over SSH: %w (last: %v)", ctx.Err(), last)
		case <-m.VM.Done():
			return nil, m.offWhy(fmt.Errorf("the machine stopped before SSH came up (last: %v)", last))
		case <-time.After(3 * time.Second):
		}
	}
}

// dialSSH is ssh.Dial with a deadline on the handshake too: QEMU's user
// network accepts the TCP connection for a guest that never answers (one
// that hangs), and ssh.Dial's Timeout covers only the connect.
func dialSSH(ctx context.Context, addr string, cfg *ssh.ClientConfig) (*ssh.Client, error) {
	d := net.Dialer{Timeout: cfg.Timeout}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	_ = conn.SetDeadline(time.Now().Add(2 * cfg.Timeout))
	c, chans, reqs, err := ssh.NewClientConn(conn, addr, cfg)
	if err != nil {
		conn.Close()
		return nil, err
	}
	_ = conn.SetDeadline(time.Time{})
	return ssh.NewClient(c, chans, reqs), nil
}

// Run runs a shell command in the guest as root and returns its stdout.
// A failure carries stderr.
func (m *Machine) Run(ctx context.Context, command string) (string, error) {
	c, err := m.Connect(ctx, 30*time.Second)
	if err != nil {
		return "", err
	}
	s, err := c.NewSession()
	if err != nil {
		return "", fmt.Errorf("ssh session: %w", err)
	}
	defer s.Close()
	var out, errb bytes.Buffer
	s.Stdout, s.Stderr = &out, &errb
	done := make(chan error, 1)
	go func() { done <- s.Run(command) }()
	select {
	case err = <-done:
	case <-ctx.Done():
		_ = s.Signal(ssh.SIGKILL)
		return out.String(), fmt.Errorf("%s: %w", command, ctx.Err())
	}
	if err != nil {
		return out.String(), fmt.Errorf("%s: %w\n%s", command, err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// disconnect drops the SSH connection (before a power-off).
func (m *Machine) disconnect() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.client != nil {
		m.client.Close()
		m.client = nil
	}
}

// PowerOff asks the guest to shut down cleanly (ACPI) and waits.
func (m *Machine) PowerOff(timeout time.Duration) error {
	m.disconnect()
	err := m.VM.Shutdown(timeout)
	m.Console.Close()
	return err
}

// PowerCut stops the machine at once, as pulling the plug would: the guest
// gets no chance to flush or stop anything.
func (m *Machine) PowerCut() {
	m.disconnect()
	m.VM.Kill()
	m.Console.Close()
}

// Diagnose is what a failed test prints: the last 100 console lines and
// `firstboot status` from the guest (over SSH when it answers, else the
// step lines firstboot wrote to the console).
func (m *Machine) Diagnose(ctx context.Context) string {
	var b strings.Builder
	fmt.Fprintf(&b, "=== %s: last 100 console lines (%s from power-on, accel %s) ===\n%s",
		m.Mode, m.Since().Round(time.Second), m.VM.Accel.Name, m.Console.Tail(100))
	select {
	case <-m.VM.Done():
		fmt.Fprintf(&b, "=== firstboot status: the machine is off (QEMU: %s); its console's step lines ===\n", m.VM.ExitStatus())
		b.WriteString(m.consoleSteps())
		return b.String()
	default:
	}
	ctx, cancel := context.WithTimeout(ctx, 45*time.Second)
	defer cancel()
	if _, err := m.Connect(ctx, 20*time.Second); err != nil {
		fmt.Fprintf(&b, "=== firstboot status: no SSH (%v); its console's step lines ===\n%s", err, m.consoleSteps())
		return b.String()
	}
	// The services log at info, below what the console shows: their
	// journal's last lines say why a step is stuck.
	out, err := m.Run(ctx, "firstboot status; systemctl --no-pager status firstboot.service | tail -n 20; "+
		"for u in bootstick-kubelet bootstick-containerd bootstick-registry; do echo \"=== journal of $u (last 25 lines) ===\"; journalctl --no-pager -o short-monotonic -n 25 -u $u.service; done")
	fmt.Fprintf(&b, "=== firstboot status (over SSH) ===\n%s", out)
	if err != nil {
		fmt.Fprintf(&b, "(%v)\n", err)
	}
	return b.String()
}

var stepLine = regexp.MustCompile(`firstboot|step [a-z-]+ \(\d+/\d+\)`)

func (m *Machine) consoleSteps() string {
	var b strings.Builder
	for _, l := range m.Console.Lines() {
		if stepLine.MatchString(l.Text) {
			fmt.Fprintf(&b, "%7.1fs | %s\n", l.At.Seconds(), l.Text)
		}
	}
	if b.Len() == 0 {
		return "(firstboot wrote nothing to the console)\n"
	}
	return b.String()
}
