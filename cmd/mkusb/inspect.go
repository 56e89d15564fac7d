package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"text/tabwriter"

	flag "github.com/spf13/pflag"

	"github.com/bootstick/bootstick/internal/bundle"
	"github.com/bootstick/bootstick/internal/cli"
	"github.com/bootstick/bootstick/internal/stick"
)

func init() {
	app.Register(cli.Command{
		Name:  "inspect",
		Usage: "inspect ISO [--json]",
		Short: "show what an ISO carries: the lock (versions, images, files), boot entries and sizes",
		Flags: func(fs *flag.FlagSet) func(context.Context, []string) error {
			asJSON := fs.Bool("json", false, "print JSON")
			return func(ctx context.Context, args []string) error {
				iso, err := cli.OneArg(args, "ISO")
				if err != nil {
					return err
				}
				rep, err := stick.Inspect(iso)
				if err != nil {
					return err
				}
				if *asJSON {
					enc := json.NewEncoder(os.Stdout)
					enc.SetIndent("", "  ")
					return enc.Encode(rep)
				}
				printReport(rep)
				return nil
			}
		},
	})
}

func printReport(r *stick.Report) {
	l := r.Lock
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "file\t%s (%.1f MB)\n", r.File, float64(r.Size)/1e6)
	fmt.Fprintf(w, "label\t%s\n", r.Label)
	fmt.Fprintf(w, "bundle\t%s (%s)\n", l.Bundle, l.BundleDigest)
	fmt.Fprintf(w, "os\tDebian %s, zstd %d\n", l.OS.Sources(), l.OS.CompressionLevel)
	var updates []string
	for _, p := range l.OS.Packages {
		if p.Suite != "" && p.Suite != l.OS.Suite {
			updates = append(updates, p.String()+" ("+p.Suite+")")
		}
	}
	if len(updates) > 0 {
		fmt.Fprintf(w, "os updates\t%s\n", strings.Join(updates, " "))
	}
	fmt.Fprintf(w, "kubernetes\t%s (%s)\n", l.Kubernetes.Version, l.Kubernetes.Source)
	fmt.Fprintf(w, "site\t%v\n", r.Site)
	w.Flush()

	fmt.Println("\nBOOT")
	for _, b := range r.Boot {
		fmt.Printf("  El Torito %-4s  emulation %s, %d sectors at %d\n", b.Platform, b.Emulation, b.Sectors, b.LoadRBA)
	}
	for _, p := range r.Partitions {
		fmt.Printf("  MBR partition %d  type %s active=%v, sectors %d+%d\n", p.Index, p.Type, p.Active, p.StartLBA, p.Sectors)
	}

	w = tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "\nIMAGE\tDIGEST\tSOURCE\n")
	for _, im := range l.Images {
		fmt.Fprintf(w, "%s\t%s\t%s\n", im.Ref, im.Digest, im.Source)
	}
	if len(l.Kubernetes.Roots) > 0 {
		fmt.Fprintf(w, "\nDEBIAN ROOT\tSUITE\tPINNED\n")
		roots := make([]string, 0, len(l.Kubernetes.Roots))
		for n := range l.Kubernetes.Roots {
			roots = append(roots, n)
		}
		sort.Strings(roots)
		for _, n := range roots {
			rt := l.Kubernetes.Roots[n]
			pins := make([]string, 0, len(rt.Pinned))
			for p, v := range rt.Pinned {
				pins = append(pins, p+"="+v)
			}
			sort.Strings(pins)
			fmt.Fprintf(w, "%s\t%s (%d packages)\t%s\n", n, rt.Suite, rt.Packages, strings.Join(pins, " "))
		}
	}
	fmt.Fprintf(w, "\nFILE\tSHA256\tSIZE\n")
	files := l.PayloadFiles()
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	sizes := map[string]int64{}
	for _, group := range [][]bundle.LockedFile{l.Manifests, l.Files, l.Packages.Binaries} {
		for _, f := range group {
			sizes[f.PayloadPath()] = f.PayloadSize()
		}
	}
	for _, n := range names {
		fmt.Fprintf(w, "/bundle/%s\t%s\t%s\n", n, files[n].Hex(), mb(sizes[n]))
	}
	if r.Build != nil {
		live := make([]string, 0, len(r.Build.Live))
		for n := range r.Build.Live {
			live = append(live, n)
		}
		sort.Strings(live)
		for _, n := range live {
			fmt.Fprintf(w, "/%s\t%s\t\n", n, r.Build.Live[n].Hex())
		}
	}
	fmt.Fprintf(w, "\nFOLDER\tSIZE\t\n")
	dirs := make([]string, 0, len(r.Sizes))
	for d := range r.Sizes {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	for _, d := range dirs {
		fmt.Fprintf(w, "/%s\t%s\t\n", d, mb(r.Sizes[d]))
	}
	fmt.Fprintf(w, "debs\t%d\t\n", len(l.Packages.Debs))
	w.Flush()
}

func mb(n int64) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("%.1f MB", float64(n)/1e6)
}
