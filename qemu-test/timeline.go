package qemutest

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/bootstick/bootstick/internal/status"
)

// Row is one line of the time table: a console milestone or a firstboot
// step, placed from power-on.
type Row struct {
	Name     string
	Source   string // "console" or "state"
	Start    time.Duration
	Duration time.Duration // 0 for a console milestone
	State    string
	Attempts int
	// Earlier marks a step finished by an earlier boot: its times are that
	// boot's.
	Earlier bool
}

// Timeline is the per-step time table of one boot.
type Timeline struct {
	Title string
	Rows  []Row
}

// milestones are the console lines that mark the boot's stages.
var milestones = []struct {
	name string
	re   *regexp.Regexp
}{
	{"boot loader", regexp.MustCompile(`ISOLINUX|GNU GRUB|Booting .*live|Loading /live/vmlinuz`)},
	{"kernel", regexp.MustCompile(`Linux version \d`)},
	{"initramfs /init", regexp.MustCompile(`Run /init as init process`)},
	{"systemd", regexp.MustCompile(`systemd\[1\]: systemd \d+.* running in system mode`)},
	{"firstboot.service", regexp.MustCompile(`bootstick: firstboot\.service starting`)},
	{"firstboot done", regexp.MustCompile(`firstboot: done in`)},
}

// BuildTimeline places the console milestones (host clock) and the state
// file's steps (guest clock, shifted by guestAhead, how far the guest's
// clock runs ahead of the host's) on one axis from powerOn.
func BuildTimeline(title string, lines []Line, rep *status.Report, guestAhead time.Duration, powerOn time.Time) Timeline {
	tl := Timeline{Title: title}
	for _, ms := range milestones {
		if l, ok := firstLine(lines, ms.re, 0); ok {
			tl.Rows = append(tl.Rows, Row{Name: ms.name, Source: "console", Start: l.At})
		}
	}
	if rep != nil {
		for _, s := range rep.Steps {
			r := Row{Name: "step " + s.Name, Source: "state", State: s.State, Attempts: s.Attempts,
				Duration: time.Duration(s.DurationSeconds * float64(time.Second))}
			if s.Skipped {
				r.State += " (check)"
			}
			if !s.Started.IsZero() {
				r.Start = s.Started.Add(-guestAhead).Sub(powerOn)
				r.Earlier = r.Start < 0
			}
			tl.Rows = append(tl.Rows, r)
		}
	}
	return tl
}

// String renders the table.
func (tl Timeline) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: time from power-on\n", tl.Title)
	fmt.Fprintf(&b, "  %-24s %9s %9s %9s  %s\n", "what", "start", "took", "end", "state")
	for _, r := range tl.Rows {
		switch {
		case r.Source == "console":
			fmt.Fprintf(&b, "  %-24s %8.1fs %9s %9s  console\n", r.Name, r.Start.Seconds(), "", "")
		case r.Earlier:
			fmt.Fprintf(&b, "  %-24s %9s %8.1fs %9s  %s, %d attempts, in an earlier boot\n", r.Name, "-", r.Duration.Seconds(), "", r.State, r.Attempts)
		case r.State == "pending":
			fmt.Fprintf(&b, "  %-24s %9s %9s %9s  pending\n", r.Name, "", "", "")
		default:
			end := ""
			if r.Duration > 0 {
				end = fmt.Sprintf("%.1fs", (r.Start + r.Duration).Seconds())
			}
			fmt.Fprintf(&b, "  %-24s %8.1fs %8.1fs %9s  %s, %d attempts\n", r.Name, r.Start.Seconds(), r.Duration.Seconds(), end, r.State, r.Attempts)
		}
	}
	return b.String()
}
