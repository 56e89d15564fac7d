package qemutest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/bootstick/bootstick/internal/qemu"
)

// Line is one serial console line, stamped with when the host saw it,
// from power-on.
type Line struct {
	At   time.Duration
	Text string
}

// Console follows a serial log file as QEMU writes it and stamps each line
// with the host's clock: the console half of the time table.
type Console struct {
	path  string
	start time.Time

	mu      sync.Mutex
	lines   []Line
	partial []byte
	off     int64
	changed chan struct{}

	stop chan struct{}
	done chan struct{}
}

// pollInterval is how often the log is read; it bounds the stamps' error.
const pollInterval = 100 * time.Millisecond

// FollowConsole starts following path; start is the power-on time.
func FollowConsole(path string, start time.Time) *Console {
	c := &Console{path: path, start: start, changed: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	go c.loop()
	return c
}

func (c *Console) loop() {
	defer close(c.done)
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		c.read()
		select {
		case <-c.stop:
			c.read()
			return
		case <-t.C:
		}
	}
}

func (c *Console) read() {
	f, err := os.Open(c.path)
	if err != nil {
		return
	}
	defer f.Close()
	if _, err := f.Seek(c.off, io.SeekStart); err != nil {
		return
	}
	data, err := io.ReadAll(f)
	if err != nil || len(data) == 0 {
		return
	}
	c.feed(data, time.Since(c.start))
}

// feed adds console bytes seen at at.
func (c *Console) feed(data []byte, at time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.off += int64(len(data))
	buf := append(c.partial, data...)
	for {
		i := bytes.IndexByte(buf, '\n')
		if i < 0 {
			break
		}
		text := strings.TrimRight(string(buf[:i]), "\r")
		buf = buf[i+1:]
		// Firmware and boot loaders draw with escape sequences; keep the
		// text.
		text = strings.TrimSpace(qemu.ConsoleText([]byte(text)))
		if text != "" {
			c.lines = append(c.lines, Line{At: at, Text: text})
		}
	}
	c.partial = append([]byte(nil), buf...)
	close(c.changed)
	c.changed = make(chan struct{})
}

// Close stops following (after a last read).
func (c *Console) Close() {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	<-c.done
}

// Lines returns a copy of every line so far.
func (c *Console) Lines() []Line {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Line(nil), c.lines...)
}

// Tail returns the last n lines, one per row, each with its time.
func (c *Console) Tail(n int) string {
	lines := c.Lines()
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	var b strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&b, "%7.1fs | %s\n", l.At.Seconds(), l.Text)
	}
	return b.String()
}

// First returns the first line matching re.
func (c *Console) First(re *regexp.Regexp) (Line, bool) {
	return firstLine(c.Lines(), re, 0)
}

func firstLine(lines []Line, re *regexp.Regexp, from int) (Line, bool) {
	for _, l := range lines[min(from, len(lines)):] {
		if re.MatchString(l.Text) {
			return l, true
		}
	}
	return Line{}, false
}

// Wait waits for a line matching re, counting from line index from (0:
// the whole log). It gives up when ctx ends or stopped is closed (the
// machine is off).
func (c *Console) Wait(ctx context.Context, re *regexp.Regexp, from int, stopped <-chan struct{}) (Line, error) {
	for {
		c.mu.Lock()
		changed := c.changed
		l, ok := firstLine(c.lines, re, from)
		c.mu.Unlock()
		if ok {
			return l, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return Line{}, fmt.Errorf("waiting for %q on the console: %w", re, ctx.Err())
		case <-stopped:
			c.read()
			if l, ok := firstLine(c.Lines(), re, from); ok {
				return l, nil
			}
			return Line{}, fmt.Errorf("the machine stopped before %q showed on the console", re)
		}
	}
}

// Len is the number of lines so far (a from for Wait).
func (c *Console) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.lines)
}
