// Command benchtable prints the rows `make bench` collected (the file the
// benchmarks appended to, benchtable.Env) as one table.
package main

import (
	"fmt"
	"os"

	"github.com/bootstick/bootstick/internal/benchtable"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: benchtable ROWS.jsonl")
		os.Exit(2)
	}
	f, err := os.Open(os.Args[1])
	if err != nil {
		fmt.Fprintf(os.Stderr, "benchtable: %v (did any benchmark run?)\n", err)
		os.Exit(1)
	}
	defer f.Close()
	rows, err := benchtable.Read(f)
	if err != nil {
		fmt.Fprintf(os.Stderr, "benchtable: %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
	if err := benchtable.Format(os.Stdout, rows); err != nil {
		fmt.Fprintf(os.Stderr, "benchtable: %v\n", err)
		os.Exit(1)
	}
}
