package main

import (
	"github.com/spf13/cobra"

	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/gateway"
	"github.com/toolmux/toolmux/internal/toolglob"
)

// search holds serve's tool search flags, which override the
// configuration's tool_search section key by key.
type search struct {
	on     bool
	above  int
	pinned []string
}

func (s *search) flags(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&s.on, "tool-search", false, "list on /mcp only the pinned tools and the meta-tools find_tools and call_tool (tool_search.enabled)")
	cmd.Flags().IntVar(&s.above, "tool-search-above", 0, "turn tool search on while /mcp has more tools than this (0: never; tool_search.above)")
	cmd.Flags().StringSliceVar(&s.pinned, "pin", nil, "a tool pattern (server/tool) listed even with tool search on (repeatable; added to tool_search.pinned)")
}

// check refuses flags that cannot be right, before anything starts.
func (s *search) check() error {
	if s.above < 0 {
		return usageError("--tool-search-above must not be negative, got %d", s.above)
	}
	for _, p := range s.pinned {
		if err := toolglob.Check(p, true); err != nil {
			return usageError("--pin %q: %v", p, err)
		}
	}
	return nil
}

// apply returns the tool search of /mcp: the configuration's, with the
// flags given over it.
func (s *search) apply(cmd *cobra.Command, ts config.ToolSearch) gateway.ToolSearch {
	out := gateway.ToolSearchFromConfig(ts)
	if cmd.Flags().Changed("tool-search") {
		out.Enabled = s.on
	}
	if cmd.Flags().Changed("tool-search-above") {
		out.Above = s.above
	}
	out.Pinned = append(append([]string(nil), out.Pinned...), s.pinned...)
	return out
}
