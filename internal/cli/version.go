package cli

import (
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Version is the release, stamped by the Makefile
// (-ldflags "-X github.com/bootstick/bootstick/internal/cli.Version=...").
var Version = "dev"

// VersionInfo is what `version --json` prints.
type VersionInfo struct {
	Program string `json:"program"`
	Version string `json:"version"`
	Go      string `json:"go"`
	// Revision is the source revision, when the build recorded one.
	Revision string `json:"revision,omitempty"`
}

// Info describes this build.
func Info(program string) VersionInfo {
	v := VersionInfo{Program: program, Version: Version, Go: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				v.Revision = s.Value
			}
		}
	}
	return v
}

func (a *App) versionCommand(failed **cobra.Command) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use: "version [--json]", Short: "print this program's version", Args: cobra.NoArgs,
		SilenceErrors: true, SilenceUsage: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			*failed = cmd
			v := Info(a.Name)
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(v)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s (%s", v.Program, v.Version, v.Go)
			if v.Revision != "" {
				fmt.Fprintf(cmd.OutOrStdout(), ", %s", v.Revision)
			}
			fmt.Fprintln(cmd.OutOrStdout(), ")")
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}
