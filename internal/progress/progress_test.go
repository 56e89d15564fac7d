package progress

import (
	"bytes"
	"regexp"
	"sync"
	"testing"
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
