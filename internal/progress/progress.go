// Package progress reports long steps: a small interface the libraries call
// (rootfs, fetch, usbwrite, gobuild and stick all report through it), bars for mkusb on a terminal, and
// plain lines elsewhere.
package progress

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// Progress is one step at a time: Start, any number of Add, Done.
// total < 0 means the amount of work is unknown (a spinner). Add may be
// called from several goroutines.
type Progress interface {
	Start(name string, total int64)
	Add(n int64)
	Done()
}

// Counter is a Progress that can count items other than bytes
// (packages compiled, say).
type Counter interface {
	StartCount(name string, total int64, unit string)
}

// Describer is a Progress that can say what happens now within a step.
type Describer interface {
	Describe(msg string)
}

// StartCount starts a step that counts units; a Progress that cannot
// count them gets Start.
func StartCount(p Progress, name string, total int64, unit string) {
	if c, ok := p.(Counter); ok {
		c.StartCount(name, total, unit)
		return
	}
	p.Start(name, total)
}

// Describe says what happens now, where p can show it.
func Describe(p Progress, msg string) {
	if d, ok := p.(Describer); ok {
		d.Describe(msg)
	}
}

// Nop reports nothing.
func Nop() Progress { return nop{} }

type nop struct{}

func (nop) Start(string, int64) {}
func (nop) Add(int64)           {}
func (nop) Done()               {}

// For returns bars on w when it is a terminal, else one line per step.
func For(w *os.File) Progress {
	if term.IsTerminal(int(w.Fd())) {
		width, _, err := term.GetSize(int(w.Fd()))
		if err != nil {
			width = 80
		}
		return &bars{w: w, width: width}
	}
	return &Lines{W: w}
}

type bars struct {
	w   io.Writer
	mu  sync.Mutex
	bar *progressbar.ProgressBar
	// name is the step's; Describe adds to it.
	name string
	// width is the terminal's: a description is cut to keep the bar on
	// one line (a wrapped line is never redrawn and tears the bar).
	width int
}

func (b *bars) Start(name string, total int64) { b.start(name, total, "") }

func (b *bars) StartCount(name string, total int64, unit string) { b.start(name, total, unit) }

func (b *bars) Describe(msg string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.bar != nil {
		b.bar.Describe(b.name + ": " + fit(msg, b.width-barRoom-len([]rune(b.name))-2))
	}
}

func (b *bars) start(name string, total int64, unit string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.bar != nil {
		b.bar.Finish()
	}
	b.name = name
	setActive(b)
	opts := []progressbar.Option{
		progressbar.OptionSetWriter(b.w),
		progressbar.OptionSetDescription(name),
		progressbar.OptionShowElapsedTimeOnFinish(),
		progressbar.OptionOnCompletion(func() { fmt.Fprintln(b.w) }),
		progressbar.OptionThrottle(100 * time.Millisecond),
		progressbar.OptionSetWidth(30),
	}
	switch {
	case total >= 0 && unit != "":
		opts = append(opts, progressbar.OptionShowCount(), progressbar.OptionSetItsString(unit), progressbar.OptionShowElapsedTimeOnFinish())
	case total >= 0:
		opts = append(opts, progressbar.OptionShowBytes(true), progressbar.OptionShowCount())
	default:
		opts = append(opts, progressbar.OptionSpinnerType(14))
	}
	b.bar = progressbar.NewOptions64(total, opts...)
}

func (b *bars) Add(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.bar != nil {
		_ = b.bar.Add64(n)
	}
}

func (b *bars) Done() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.bar != nil {
		_ = b.bar.Finish()
		b.bar = nil
	}
	setActive(nil)
}

// barRoom is what a bar needs besides its description: the bar itself,
// the percentage, the counts and the times.
const barRoom = 75

// fit cuts s to at most n runes, keeping its end (the package compiling
// now) behind an ellipsis.
func fit(s string, n int) string {
	r := []rune(s)
	if n < 10 {
		n = 10
	}
	if len(r) <= n {
		return s
	}
	return "…" + string(r[len(r)-n+1:])
}

// write writes a log line above the bar: the bar's line is cleared first
// and drawn again after, so log lines never tear it.
func (b *bars) write(w io.Writer, p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.bar != nil {
		_ = b.bar.Clear()
	}
	n, err := w.Write(p)
	if b.bar != nil {
		_ = b.bar.RenderBlank()
	}
	return n, err
}

// active is the bar being drawn, if any: LogWriter writes around it.
var active struct {
	mu   sync.Mutex
	bars *bars
}

func setActive(b *bars) {
	active.mu.Lock()
	active.bars = b
	active.mu.Unlock()
}

// LogWriter is w for log lines (slog's handler): while a bar is drawn, a
// line is written above it instead of through it.
func LogWriter(w io.Writer) io.Writer { return logWriter{w} }

type logWriter struct{ w io.Writer }

func (l logWriter) Write(p []byte) (int, error) {
	active.mu.Lock()
	b := active.bars
	active.mu.Unlock()
	if b == nil {
		return l.w.Write(p)
	}
	return b.write(l.w, p)
}

// Lines writes "NAME ..." when a step starts, a line every Every (5 s by
// default) while it runs (what it does now, how far it is, the time so
// far), and "NAME: done in 1.2s" when it ends: for logs and pipes.
type Lines struct {
	W     io.Writer
	Every time.Duration

	mu    sync.Mutex
	name  string
	unit  string
	desc  string
	n     int64
	total int64
	start time.Time
	stop  chan struct{}
}

func (l *Lines) Start(name string, total int64) { l.begin(name, total, "") }

func (l *Lines) StartCount(name string, total int64, unit string) { l.begin(name, total, unit) }

func (l *Lines) begin(name string, total int64, unit string) {
	l.Done()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.name, l.unit, l.desc, l.n, l.total, l.start = name, unit, "", 0, total, time.Now()
	fmt.Fprintf(l.W, "%s ...\n", name)
	every := l.Every
	if every == 0 {
		every = 5 * time.Second
	}
	stop := make(chan struct{})
	l.stop = stop
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				l.tick()
			}
		}
	}()
}

// tick prints where the step is.
func (l *Lines) tick() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.name == "" {
		return
	}
	line := l.name
	if l.desc != "" {
		line += ": " + l.desc
	}
	switch {
	case l.unit != "" && l.total > 0:
		line += fmt.Sprintf(", %d/%d %s", l.n, l.total, l.unit)
	case l.unit == "" && l.n > 0:
		line += fmt.Sprintf(", %.1f MB", float64(l.n)/1e6)
	}
	fmt.Fprintf(l.W, "%s, %s so far\n", line, time.Since(l.start).Round(time.Second))
}

func (l *Lines) Describe(msg string) {
	l.mu.Lock()
	l.desc = msg
	l.mu.Unlock()
}

func (l *Lines) Add(n int64) {
	l.mu.Lock()
	l.n += n
	l.mu.Unlock()
}

func (l *Lines) Done() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stop != nil {
		close(l.stop)
		l.stop = nil
	}
	if l.name == "" {
		return
	}
	took := time.Since(l.start).Round(100 * time.Millisecond)
	switch {
	case l.unit != "":
		fmt.Fprintf(l.W, "%s: done, %d %s in %s\n", l.name, l.n, l.unit, took)
	case l.n > 0:
		fmt.Fprintf(l.W, "%s: done, %.1f MB in %s\n", l.name, float64(l.n)/1e6, took)
	default:
		fmt.Fprintf(l.W, "%s: done in %s\n", l.name, took)
	}
	l.name = ""
}
