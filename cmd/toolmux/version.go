package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set at link time (-ldflags "-X main.version=v1.2.3"); otherwise
// the module version from the build info is used.
var version = ""

// versionInfo is what `toolmux version --json` prints.
type versionInfo struct {
	// Version is the release (or module version), "dev" for a build from
	// a work tree.
	Version string `json:"version"`
	// Revision is the VCS commit the binary was built from, when known.
	Revision string `json:"revision,omitempty"`
	// Modified says that the work tree had changes not committed.
	Modified bool   `json:"modified,omitempty"`
	Go       string `json:"go"`
	OS       string `json:"os"`
	Arch     string `json:"arch"`
}

func buildVersion() versionInfo {
	v := versionInfo{Version: version, Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
	info, ok := debug.ReadBuildInfo()
	if v.Version == "" && ok {
		v.Version = info.Main.Version
	}
	if v.Version == "" || v.Version == "(devel)" {
		v.Version = "dev"
	}
	if ok {
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Revision = s.Value
			case "vcs.modified":
				v.Modified = s.Value == "true"
			}
		}
	}
	return v
}

func versionString() string {
	v := buildVersion()
	s := v.Version
	if len(v.Revision) >= 12 {
		s += " (" + v.Revision[:12] + ")"
	}
	return s
}

func (a *app) versionCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Long: `Print toolmux's version, the commit it was built from (when known), the Go
version and the platform. With --json, one object: version, revision,
modified, go, os, arch.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if asJSON {
				return writeJSON(a, buildVersion())
			}
			fmt.Fprintf(a.stdout, "toolmux %s %s %s/%s\n", versionString(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object (for scripts)")
	return cmd
}
