// Package benchtable collects the rows of `make bench`: each benchmark
// measures bootstick against its reference side by side in one run and
// records a row (both sides, the ratio, the goal, what was measured). The
// rows go to the file BOOTSTICK_BENCH_ROWS names, one JSON object a line,
// and Format prints them as one table.
package benchtable

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
)

// Env names the file the rows are appended to; unset, rows are only
// logged.
const Env = "BOOTSTICK_BENCH_ROWS"

// Side is one side of a comparison: what ran and its figure.
type Side struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
}

// Row is one line of the table. Ratio is Ours.Value/Ref.Value unless set.
type Row struct {
	Group string  `json:"group"` // e.g. "registry"
	Name  string  `json:"name"`
	Ours  Side    `json:"ours"`
	Ref   Side    `json:"ref"`
	Ratio float64 `json:"ratio"`
	// Better says which way is better: "higher" or "lower" (the ratio's).
	Better string `json:"better,omitempty"`
	Goal   string `json:"goal,omitempty"` // e.g. "≥ 0.8"
	// Met is whether the goal holds; nil when there is none.
	Met  *bool  `json:"met,omitempty"`
	What string `json:"what"` // what was measured, in words
}

var mu sync.Mutex

// Record reports the row as the benchmark's metric (the ratio) and
// appends it to the rows file.
func Record(b testing.TB, r Row) {
	b.Helper()
	if r.Ratio == 0 && r.Ref.Value != 0 {
		r.Ratio = r.Ours.Value / r.Ref.Value
	}
	if bb, ok := b.(*testing.B); ok {
		bb.ReportMetric(r.Ratio, strings.ReplaceAll(r.Name, " ", "_")+"-ratio")
	}
	b.Logf("%s: %s %.3g %s, %s %.3g %s, ratio %.2f %s", r.Name, r.Ours.Name, r.Ours.Value, r.Ours.Unit,
		r.Ref.Name, r.Ref.Value, r.Ref.Unit, r.Ratio, r.Goal)
	path := os.Getenv(Env)
	if path == "" {
		return
	}
	data, err := json.Marshal(r)
	if err != nil {
		b.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		b.Fatalf("bench rows: %v", err)
	}
	defer f.Close()
	if _, err := f.Write(append(data, '\n')); err != nil {
		b.Fatalf("bench rows %s: %v", path, err)
	}
}

// DropCaches writes back and drops the page cache (root only), so that
// the next read comes from the disk, as a booted stick reads the stick.
func DropCaches(b testing.TB) {
	b.Helper()
	if err := exec.Command("sync").Run(); err != nil {
		b.Fatalf("sync: %v", err)
	}
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0o200); err != nil {
		b.Fatalf("dropping the page cache (root only): %v", err)
	}
}

// Goal returns a goal string and whether the ratio meets it: at least min
// ("higher") or at most max ("lower").
func Goal(ratio float64, better string, bound float64) (string, *bool) {
	met := ratio >= bound
	op := "≥"
	if better == "lower" {
		met, op = ratio <= bound, "≤"
	}
	return fmt.Sprintf("%s %.2g", op, bound), &met
}

// Read parses a rows file.
func Read(r io.Reader) ([]Row, error) {
	var rows []Row
	dec := json.NewDecoder(r)
	for dec.More() {
		var row Row
		if err := dec.Decode(&row); err != nil {
			return nil, fmt.Errorf("bench row %d: %w", len(rows)+1, err)
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// Format prints the rows as one table, grouped, then what each measured.
func Format(w io.Writer, rows []Row) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tROW\tBOOTSTICK\tREFERENCE\tRATIO\tGOAL\t")
	for _, r := range rows {
		goal := r.Goal
		if r.Met != nil {
			if *r.Met {
				goal += " met"
			} else {
				goal += " MISSED"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.2f\t%s\t\n", r.Group, r.Name, side(r.Ours), side(r.Ref), r.Ratio, goal)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nWhat each row measured:")
	for i := 0; i < len(rows); {
		// Rows of a group that measured the same way are said once.
		j := i + 1
		for j < len(rows) && rows[j].Group == rows[i].Group && rows[j].What == rows[i].What {
			j++
		}
		name := rows[i].Name
		if j > i+1 {
			name = "every row"
		}
		fmt.Fprintf(w, "- %s / %s: %s\n", rows[i].Group, name, rows[i].What)
		i = j
	}
	return nil
}

func side(s Side) string {
	v := fmt.Sprintf("%.3g", s.Value)
	if s.Value >= 1000 {
		v = fmt.Sprintf("%.0f", s.Value)
	}
	return fmt.Sprintf("%s %s %s", s.Name, v, s.Unit)
}
