package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/coreos/go-systemd/v22/journal"
)

// syslog priorities for the "<N>" prefix journald reads off a line
// (sd-daemon(3)): the journal then knows a step's progress (notice) from
// a debug line, and journald.conf's MaxLevelConsole can keep the console
// to what an operator should see.
const (
	prioErr     = 3
	prioWarning = 4
	prioNotice  = 5
	prioDebug   = 7
)

func priority(l slog.Level) int {
	switch {
	case l >= slog.LevelError:
		return prioErr
	case l >= slog.LevelWarn:
		return prioWarning
	case l >= slog.LevelInfo:
		return prioNotice
	default:
		return prioDebug
	}
}

// prefixWriter writes each record's line with the priority of the
// record being written.
type prefixWriter struct {
	mu   sync.Mutex
	w    io.Writer
	prio int
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	if _, err := fmt.Fprintf(p.w, "<%d>", p.prio); err != nil {
		return 0, err
	}
	return p.w.Write(b)
}

// priorityHandler prefixes every line of the text handler it wraps with
// the record's syslog priority.
type priorityHandler struct {
	out   *prefixWriter
	inner slog.Handler
}

func newPriorityHandler(w io.Writer, opts *slog.HandlerOptions) slog.Handler {
	out := &prefixWriter{w: w}
	return &priorityHandler{out: out, inner: slog.NewTextHandler(out, opts)}
}

func (h *priorityHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

func (h *priorityHandler) Handle(ctx context.Context, r slog.Record) error {
	h.out.mu.Lock()
	defer h.out.mu.Unlock()
	h.out.prio = priority(r.Level)
	return h.inner.Handle(ctx, r)
}

func (h *priorityHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &priorityHandler{out: h.out, inner: h.inner.WithAttrs(as)}
}

func (h *priorityHandler) WithGroup(name string) slog.Handler {
	return &priorityHandler{out: h.out, inner: h.inner.WithGroup(name)}
}

// stderrIsJournal reports whether w is this process's stderr and systemd
// connected it to the journal (JOURNAL_STREAM).
func stderrIsJournal(w io.Writer) bool {
	if w != io.Writer(stderrFile) {
		return false
	}
	ok, err := journal.StderrIsJournalStream()
	return err == nil && ok
}
