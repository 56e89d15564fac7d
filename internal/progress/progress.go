// Package progress reports long steps: a small interface the libraries call
// (the same shape as rootfs.Progress), bars for mkusb on a terminal, and
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

// Nop reports nothing.
func Nop() Progress { return nop{} }

type nop struct{}

func (nop) Start(string, int64) {}
func (nop) Add(int64)           {}
func (nop) Done()               {}

// For returns bars on w when it is a terminal, else one line per step.
func For(w *os.File) Progress {
	if term.IsTerminal(int(w.Fd())) {
		return &bars{w: w}
	}
	return &Lines{W: w}
}

type bars struct {
	w   io.Writer
	mu  sync.Mutex
	bar *progressbar.ProgressBar
}

func (b *bars) Start(name string, total int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.bar != nil {
		b.bar.Finish()
	}
	opts := []progressbar.Option{
		progressbar.OptionSetWriter(b.w),
		progressbar.OptionSetDescription(name),
		progressbar.OptionShowElapsedTimeOnFinish(),
		progressbar.OptionOnCompletion(func() { fmt.Fprintln(b.w) }),
		progressbar.OptionThrottle(100 * time.Millisecond),
		progressbar.OptionSetWidth(30),
	}
	if total >= 0 {
		opts = append(opts, progressbar.OptionShowBytes(true), progressbar.OptionShowCount())
	} else {
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
}

// Lines writes "NAME ..." when a step starts and "NAME: done in 1.2s" when
// it ends: for logs and pipes.
type Lines struct {
	W     io.Writer
	mu    sync.Mutex
	name  string
	n     int64
	start time.Time
}

func (l *Lines) Start(name string, total int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.name, l.n, l.start = name, 0, time.Now()
	fmt.Fprintf(l.W, "%s ...\n", name)
}

func (l *Lines) Add(n int64) {
	l.mu.Lock()
	l.n += n
	l.mu.Unlock()
}

func (l *Lines) Done() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.name == "" {
		return
	}
	if l.n > 0 {
		fmt.Fprintf(l.W, "%s: done, %.1f MB in %s\n", l.name, float64(l.n)/1e6, time.Since(l.start).Round(100*time.Millisecond))
	} else {
		fmt.Fprintf(l.W, "%s: done in %s\n", l.name, time.Since(l.start).Round(100*time.Millisecond))
	}
	l.name = ""
}
