// Package status tells people and machines how firstboot is doing: STATUS
// lines for systemd (sd_notify), a console banner in /etc/issue.d, and the
// report behind `firstboot status`.
package status

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/bootstick/bootstick/internal/logctx"

	"github.com/bootstick/bootstick/internal/atomicfile"
	"github.com/bootstick/bootstick/internal/pipeline"
)

// Line is the one-line summary of an event, as STATUS and the console show it.
func Line(e pipeline.Event) string {
	switch e.Phase {
	case pipeline.PhaseStarted:
		return fmt.Sprintf("step %d/%d: %s", e.Index, e.Total, e.Step)
	case pipeline.PhaseDone:
		return fmt.Sprintf("step %d/%d: %s done in %s", e.Index, e.Total, e.Step, e.Duration.Round(100_000_000))
	case pipeline.PhaseSkipped:
		return fmt.Sprintf("step %d/%d: %s already done", e.Index, e.Total, e.Step)
	case pipeline.PhaseFailed:
		return fmt.Sprintf("step %d/%d: %s FAILED: %v", e.Index, e.Total, e.Step, e.Err)
	case pipeline.PhaseProgress:
		return fmt.Sprintf("step %d/%d: %s: %s", e.Index, e.Total, e.Step, e.Detail)
	}
	return e.Step
}

// Notifier sends each event to systemd as a STATUS= line. Outside a
// systemd service (no NOTIFY_SOCKET) it does nothing.
type Notifier struct {
	Log *slog.Logger
	// Socket is systemd's notification socket (NOTIFY_SOCKET).
	Socket string
}

// NewNotifier takes NOTIFY_SOCKET out of this process's environment, so
// that no child (kubeadm and what it runs) inherits it: only firstboot
// itself tells systemd it is ready, and systemd does not log refused
// notifications from other PIDs.
func NewNotifier(ctx context.Context) *Notifier {
	n := &Notifier{Log: logctx.From(ctx), Socket: os.Getenv("NOTIFY_SOCKET")}
	os.Unsetenv("NOTIFY_SOCKET")
	return n
}

func (n *Notifier) Update(e pipeline.Event) { n.notify("STATUS=" + oneLine(Line(e))) }

// Ready tells systemd that the service is up (Type=notify), with a status.
func (n *Notifier) Ready(status string) { n.notify("READY=1\nSTATUS=" + oneLine(status)) }

// Status sends a free-form STATUS line.
func (n *Notifier) Status(status string) { n.notify("STATUS=" + oneLine(status)) }

// notify sends one datagram, as sd_notify(3) does (go-systemd's
// daemon.SdNotify reads the socket from the environment, which children
// would inherit).
func (n *Notifier) notify(msg string) {
	if n.Socket == "" {
		return
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: n.Socket, Net: "unixgram"})
	if err == nil {
		_, err = conn.Write([]byte(msg))
		conn.Close()
	}
	if err != nil && n.Log != nil {
		n.Log.Debug("sd_notify", "err", err)
	}
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 400 {
		s = s[:400] + "…"
	}
	return s
}

// Console keeps a banner in /etc/issue.d (agetty shows it above the login
// prompt) with the current step and where the cluster answers.
type Console struct {
	// Path is the issue file, e.g. /etc/issue.d/bootstick.issue.
	Path string
	// Address is shown as the cluster's address, e.g. https://192.0.2.10:6443.
	Address string
	Log     *slog.Logger

	mu    sync.Mutex
	last  string
	hosts string // the site's hosts counted by state, once the site step reports them
}

// DefaultIssuePath is where the appliance's banner goes.
const DefaultIssuePath = "/etc/issue.d/bootstick.issue"

func (c *Console) Update(e pipeline.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	state := "in progress"
	switch {
	case e.Phase == pipeline.PhaseFailed:
		state = "FAILED (run: firstboot status)"
	case e.Index == e.Total && (e.Phase == pipeline.PhaseDone || e.Phase == pipeline.PhaseSkipped):
		state = "ready"
	}
	if e.Phase == pipeline.PhaseProgress && strings.HasPrefix(e.Detail, "hosts:") {
		c.hosts = e.Detail // kept under every later line, done included
	}
	c.write(Banner(state, Line(e), c.Address, c.hosts))
}

// Banner is the issue file's content. Backslashes are doubled: agetty
// reads \x sequences in issue files.
func Banner(state, line, address, hosts string) string {
	var b strings.Builder
	b.WriteString("\nbootstick infra-local-controller: " + state + "\n")
	b.WriteString("  " + line + "\n")
	if hosts != "" && !strings.HasSuffix(line, hosts) {
		b.WriteString("  " + hosts + "\n")
	}
	if address != "" {
		b.WriteString("  cluster: " + address + "\n")
	}
	b.WriteString("  details: firstboot status\n\n")
	return strings.ReplaceAll(b.String(), `\`, `\\`)
}

func (c *Console) write(s string) {
	if s == c.last {
		return
	}
	c.last = s
	if err := os.MkdirAll(filepath.Dir(c.Path), 0o755); err == nil {
		err = atomicfile.Write(c.Path, []byte(s), 0o644)
		if err != nil && c.Log != nil {
			c.Log.Warn("writing the console banner", "err", err)
		}
	}
}
