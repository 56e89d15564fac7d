package benchtable

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRecordReadFormat: rows a benchmark records come back from the file
// and print as one table with both sides, the ratio, the goal and whether
// it was met, then what each measured (said once for rows that share it).
func TestRecordReadFormat(t *testing.T) {
	file := filepath.Join(t.TempDir(), "rows.jsonl")
	t.Setenv(Env, file)
	g, met := Goal(0.5, "lower", 1.5)
	Record(t, Row{Group: "bring-up", Name: "firstboot vs kubeadm", Ours: Side{"firstboot", 30, "s"}, Ref: Side{"kubeadm", 60, "s"},
		Goal: g, Met: met, What: "empty host to Ready"})
	g, met = Goal(0.7, "higher", 1.0)
	Record(t, Row{Group: "registry", Name: "pull", Ours: Side{"ours", 700, "MB/s"}, Ref: Side{"distribution", 1000, "MB/s"},
		Goal: g, Met: met, What: "same blobs"})
	Record(t, Row{Group: "iso size", Name: "live OS", Ours: Side{"part", 400, "MB"}, Ref: Side{"ISO", 1600, "MB"}, What: "bytes of the part"})
	Record(t, Row{Group: "iso size", Name: "packages", Ours: Side{"part", 200, "MB"}, Ref: Side{"ISO", 1600, "MB"}, What: "bytes of the part"})
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := Read(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 4 || rows[0].Ratio != 0.5 || rows[2].Ratio != 0.25 {
		t.Fatalf("rows read back: %+v", rows)
	}
	var out bytes.Buffer
	if err := Format(&out, rows); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{"firstboot 30 s", "kubeadm 60 s", "0.50", "≤ 1.5 met", "≥ 1 MISSED", "ISO 1600 MB",
		"- bring-up / firstboot vs kubeadm: empty host to Ready", "- iso size / every row: bytes of the part"} {
		if !strings.Contains(text, want) {
			t.Errorf("the table does not say %q:\n%s", want, text)
		}
	}
	if strings.Count(text, "bytes of the part") != 1 {
		t.Errorf("a what shared by rows is said more than once:\n%s", text)
	}
}

// TestReadNamesBadRow: a damaged rows file is named by its row.
func TestReadNamesBadRow(t *testing.T) {
	_, err := Read(strings.NewReader(`{"group":"a"}` + "\n{oops\n"))
	if err == nil || !strings.Contains(err.Error(), "bench row 2") {
		t.Fatalf("error %v, want it to name row 2", err)
	}
}
