package progress

import (
	"bytes"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestLines(t *testing.T) {
	var buf bytes.Buffer
	l := &Lines{W: &buf}
	l.Start("fetch", 100)
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); l.Add(500_000) }()
	}
	wg.Wait()
	l.Done()
	l.Done() // a second Done prints nothing
	l.Start("iso", -1)
	l.Done()
	re := regexp.MustCompile(`^fetch \.\.\.\nfetch: done, 2\.0 MB in [0-9.]+m?s\niso \.\.\.\niso: done in [0-9.]+m?s\n$`)
	if !re.MatchString(buf.String()) {
		t.Errorf("got:\n%s", buf.String())
	}
}

func TestBarsDoNotPanic(t *testing.T) {
	var buf bytes.Buffer
	b := &bars{w: &buf}
	b.Add(1) // before Start
	b.Start("a", 10)
	b.Add(5)
	b.Start("b", -1) // Start finishes the previous bar
	b.Add(3)
	b.Done()
	b.Done()
	if buf.Len() == 0 {
		t.Error("bars wrote nothing")
	}
	var _ Progress = Nop()
}

func TestFitKeepsTheEnd(t *testing.T) {
	if got := fit("recipe 1/5 kubernetes: compiling k8s.io/client-go/kubernetes/typed/apps/v1beta2", 30); len([]rune(got)) != 30 || !strings.HasSuffix(got, "typed/apps/v1beta2") {
		t.Errorf("fit = %q (%d runes), want 30 runes ending in the package", got, len([]rune(got)))
	}
	if got := fit("short", 30); got != "short" {
		t.Errorf("fit(short) = %q", got)
	}
}

// A log line written while a bar is drawn lands on a line of its own,
// and the bar is drawn again under it.
func TestLogWriterWritesAboveTheBar(t *testing.T) {
	var buf bytes.Buffer
	b := &bars{w: &buf, width: 120}
	b.StartCount("recipe 1/1 x", 10, "packages")
	b.Add(3)
	w := LogWriter(&buf)
	if _, err := w.Write([]byte("time=now level=INFO msg=hello\n")); err != nil {
		t.Fatal(err)
	}
	b.Done()
	out := buf.String()
	i := strings.Index(out, "time=now level=INFO msg=hello\n")
	if i < 0 {
		t.Fatalf("the log line is missing:\n%q", out)
	}
	before, after := out[:i], out[i+len("time=now level=INFO msg=hello\n"):]
	if !strings.HasSuffix(strings.TrimRight(before, " "), "\r") {
		t.Errorf("the bar's line was not cleared before the log line:\n%q", before)
	}
	if !strings.Contains(after, "recipe 1/1 x") {
		t.Errorf("the bar was not drawn again under the log line:\n%q", after)
	}
	// With no bar, the writer passes lines through.
	var plain bytes.Buffer
	LogWriter(&plain).Write([]byte("x\n"))
	if plain.String() != "x\n" {
		t.Errorf("plain = %q", plain.String())
	}
}

// Lines prints where a counting step is, every tick, with what it does now.
func TestLinesTick(t *testing.T) {
	var buf syncBuffer
	l := &Lines{W: &buf, Every: time.Hour}
	l.StartCount("recipe 1/2 k", 100, "packages")
	l.Add(40)
	l.Describe("compiling k8s.io/api")
	l.tick()
	l.Done()
	re := regexp.MustCompile(`recipe 1/2 k: compiling k8s.io/api, 40/100 packages, \ds so far\n`)
	if !re.MatchString(buf.String()) {
		t.Errorf("got:\n%s", buf.String())
	}
	if !strings.Contains(buf.String(), "recipe 1/2 k: done, 40 packages in") {
		t.Errorf("no done line:\n%s", buf.String())
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }
