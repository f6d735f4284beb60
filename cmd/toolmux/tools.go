package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/toolmux/toolmux"
	"github.com/toolmux/toolmux/manager"
	"github.com/toolmux/toolmux/pipeline"
	"github.com/toolmux/toolmux/policy"
	"github.com/toolmux/toolmux/tool"
)

// toolEntry is one element of `toolmux tools --json`: a tool (its fields
// inline), or a server that has no tools to show because it failed or is
// disabled.
type toolEntry struct {
	*tool.Tool
	Server string     `json:"server"`
	State  tool.State `json:"state"`
	Error  string     `json:"error,omitempty"`
	Detail string     `json:"detail,omitempty"`
	// Restarts counts the server's restarts (crashes, dropped or wedged
	// sessions) while this command ran.
	Restarts int `json:"restarts,omitempty"`
	// Approval is what the policy does with a call of the tool in the
	// current approval mode: allow, ask or deny ("ask" when some calls
	// would be asked about, depending on their arguments).
	Approval string `json:"approval,omitempty"`
	// Pin is the tool's pin state: pinned, changed (with the difference) or
	// off (its server is not pinned, or there is no data directory).
	Pin *pipeline.PinStatus `json:"pin,omitempty"`
}

func (a *app) toolsCommand() *cobra.Command {
	var asJSON bool
	var accept []string
	cmd := &cobra.Command{
		Use:   "tools",
		Short: "List every tool of every configured server, with server health",
		Long: `List the aggregated catalog: every allowed tool of every server, under the
name models and MCP clients see (server__tool), with each server's state.
Servers that failed are listed with their error; they never stop the others.

The APPROVAL column says what the policy does with a call of each tool in
the approval mode in force (--approval-mode, else policy.mode): allow, ask
(a person must approve; refused when nobody can be asked) or deny.

The PIN column says whether each tool's definition is the one pinned when
it was first seen (pinned) or the server now presents another (changed:
the difference is printed below the table). A changed tool whose calls are
held is listed with its pinned definition, as models are shown it; the new
one is only in the difference. --accept SERVER/TOOL pins the definition
the server presents now, so calls of a held tool go on.

While the servers start, stderr shows each as it comes up, with the time it
took, when it is a terminal; elsewhere it names only the servers slower
than a few seconds.

Exit status: 0 when every configured server came up (a server disabled in
the configuration is no failure), 1 when one or more failed (they are
still listed, with their errors, and the others' tools too), so that a
CI step "toolmux tools" checks that all servers come up; 2 for a mistake
of the command line or the configuration.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st := newStartup(a.stderr)
			// Listing needs no task log, events or agents.
			rt, err := a.open(cmd.Context(), toolmux.Options{NoTaskLog: true, NoEvents: true, NoAgents: true,
				ManagerOptions: []manager.Option{st.option()}})
			if err != nil {
				return err
			}
			defer closeRuntime(cmd.Context(), rt)
			st.begin()
			cat, err := rt.Manager.Tools(cmd.Context())
			st.end()
			if err != nil {
				return &exitError{code: exitFailed, err: err}
			}
			if len(accept) > 0 {
				return a.acceptPins(rt, cat, accept)
			}
			// Each tool as a model is shown it: a held tool with its
			// pinned definition (pipeline.Pins.Shown), since this output
			// may well be read by one; what its server presents instead
			// is the pin's difference, marked as the change to accept.
			shown := rt.Pins.Shown(cat)
			entries := catalogEntries(shown, rt.Policy)
			pinEntries(rt.Pins, cat, entries)
			if asJSON {
				enc := json.NewEncoder(a.stdout)
				enc.SetIndent("", "  ")
				if err := enc.Encode(entries); err != nil {
					return err
				}
			} else {
				printToolTable(a, shown, entries, rt.Policy.Mode())
			}
			return failedServers(cat)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON array (for scripts)")
	cmd.Flags().StringArrayVar(&accept, "accept", nil, "accept the definition SERVER/TOOL presents now as its pin (repeatable)")
	return cmd
}

// failedServers is the exit of tools when servers failed to come up
// (exit 1, naming them), nil when all did; a disabled server was not
// asked to.
func failedServers(cat *tool.Catalog) error {
	var failed []string
	for _, h := range cat.Servers() {
		if h.State == tool.StateFailed {
			failed = append(failed, h.Name)
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return &exitError{code: exitFailed, err: fmt.Errorf("%s failed to come up: %s (the list says why)",
		plural(len(failed), "server"), strings.Join(failed, ", "))}
}

// acceptPins pins the definitions the servers present now of the tools
// named SERVER/TOOL.
func (a *app) acceptPins(rt *toolmux.Runtime, cat *tool.Catalog, names []string) error {
	if rt.Pins == nil {
		return &exitError{code: exitFailed, err: fmt.Errorf("--accept: no data directory to keep pins in")}
	}
	for _, n := range names {
		server, name, ok := strings.Cut(n, "/")
		if !ok || server == "" || name == "" {
			return usageError("--accept %q: expected SERVER/TOOL", n)
		}
		def, found := cat.Find(server, name)
		if !found {
			msg := fmt.Sprintf("--accept %s: no such tool", n)
			if sug := cat.SuggestTool(server, name); sug != "" {
				msg += fmt.Sprintf(" (did you mean %s?)", sug)
			}
			return &exitError{code: exitFailed, err: errors.New(msg)}
		}
		pin, err := rt.Pins.Accept(def)
		if err != nil {
			return &exitError{code: exitFailed, err: fmt.Errorf("--accept %s: %w", n, err)}
		}
		fmt.Fprintf(a.stdout, "accepted %s/%s (sha256 %s)\n", server, name, pin.SHA256)
	}
	return nil
}

// pinEntries fills in the pin state of each tool entry: of the definition
// its server presents (in presented), not the one shown.
func pinEntries(pins *pipeline.Pins, presented *tool.Catalog, entries []toolEntry) {
	for i := range entries {
		e := &entries[i]
		if e.Tool == nil {
			continue
		}
		st := pipeline.PinStatus{Server: e.Tool.Server, Tool: e.Tool.Name, State: pipeline.PinStateOff, Policy: pipeline.PinOff}
		if pins != nil {
			def, ok := presented.Find(e.Tool.Server, e.Tool.Name)
			if !ok {
				def = *e.Tool
			}
			var err error
			if st, err = pins.Status(def); err != nil {
				st = pipeline.PinStatus{Server: e.Tool.Server, Tool: e.Tool.Name, State: "error", Diff: err.Error()}
			}
		}
		e.Pin = &st
	}
}

func catalogEntries(cat *tool.Catalog, engine *policy.Engine) []toolEntry {
	entries := make([]toolEntry, 0, cat.Len()+len(cat.Servers()))
	for _, h := range cat.Servers() {
		n := 0
		for _, t := range cat.Tools() {
			if t.Server != h.Name {
				continue
			}
			n++
			entries = append(entries, toolEntry{Tool: &t, Server: t.Server, State: h.State, Restarts: h.Restarts, Approval: string(engine.Requires(t))})
		}
		if n == 0 {
			entries = append(entries, toolEntry{Server: h.Name, State: h.State, Error: h.Error, Detail: h.Detail, Restarts: h.Restarts})
		}
	}
	return entries
}

func printToolTable(a *app, cat *tool.Catalog, entries []toolEntry, mode policy.Mode) {
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVER\tSTATE\tNAME\tAPPROVAL\tPIN\tDESCRIPTION")
	for _, e := range entries {
		if e.Tool == nil {
			msg := e.Error
			if msg == "" {
				msg = "(no tools)"
			}
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t%s\n", e.Server, e.State, oneLine(msg, 100))
			continue
		}
		pin := "-"
		if e.Pin != nil {
			pin = e.Pin.State
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", e.Server, e.State, e.Exposed, e.Approval, pin, oneLine(e.Description, 80))
	}
	tw.Flush()
	// Changed definitions: what changed, and how to accept it.
	for _, e := range entries {
		if e.Pin == nil || e.Pin.State != pipeline.PinStateChanged {
			continue
		}
		fmt.Fprintf(a.stdout, "\n%s/%s changed since it was pinned (policy %s; accept with --accept %s/%s); pending, not accepted (- pinned, + presented now):\n%s\n",
			e.Pin.Server, e.Pin.Tool, e.Pin.Policy, e.Pin.Server, e.Pin.Tool, indent(e.Pin.Diff, "  "))
	}
	// Servers that are not well: what went wrong, in full (the table cuts
	// errors to one short line; the cause of a failure, a refused
	// connection or the stderr of a crashed process, is at the end of the
	// error or in its detail).
	for _, h := range cat.Servers() {
		if h.State != tool.StateFailed && h.State != tool.StateDegraded || h.Error == "" {
			continue
		}
		fmt.Fprintf(a.stdout, "\n%s (%s", h.Name, h.State)
		if h.Restarts > 0 {
			fmt.Fprintf(a.stdout, ", %s", plural(h.Restarts, "restart"))
		}
		fmt.Fprintf(a.stdout, "): %s\n", h.Error)
		if h.Detail != "" {
			fmt.Fprintln(a.stdout, indent(h.Detail, "  "))
		}
	}
	for _, c := range cat.Collisions() {
		fmt.Fprintf(a.stdout, "\nnote: %s/%s is exposed as %s (%s is taken by %s)\n", c.Server, c.Tool, c.Assigned, c.Name, c.Holder)
	}
	fmt.Fprintf(a.stdout, "\n%s from %s; approval mode %s\n", plural(cat.Len(), "tool"), serverCount(cat.Servers()), mode)
}

// oneLine returns the first line of s, cut to max runes.
func oneLine(s string, max int) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if r := []rune(s); len(r) > max {
		return string(r[:max-1]) + "…"
	}
	return s
}

func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = prefix + l
	}
	return strings.Join(lines, "\n")
}

// pinCatalog pins the tools of cat never seen before, so that a server
// changing a definition after serve listed it is caught even before the
// tool's first call, and says on stderr which tools changed since they
// were pinned.
func (a *app) pinCatalog(rt *toolmux.Runtime, cat *tool.Catalog) {
	if rt.Pins == nil || cat == nil {
		return
	}
	for _, t := range cat.Tools() {
		st, err := rt.Pins.Status(t)
		switch {
		case err != nil:
			a.logger().Warn("pinning", "server", t.Server, "tool", t.Name, "error", err)
		case st.State == pipeline.PinStateChanged:
			fmt.Fprintf(a.stderr, "toolmux: %s/%s changed since it was pinned (policy %s; see toolmux tools, accept with toolmux tools --accept %s/%s)\n",
				t.Server, t.Name, st.Policy, t.Server, t.Name)
		}
	}
}
