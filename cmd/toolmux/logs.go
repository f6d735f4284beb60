package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/toolmux/toolmux"
	"github.com/toolmux/toolmux/fleet"
	"github.com/toolmux/toolmux/tasklog"
	"github.com/toolmux/toolmux/tool"
)

func (a *app) logsCommand() *cobra.Command {
	var (
		status string
		limit  int
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "logs",
		Short: "List recent tasks from the task log",
		Long: `List the most recent tasks of the task log (the journal in the data
directory), newest first: id, status, start time, duration, number of tool
calls (and how many failed) and the first line of the input.

"toolmux logs show ID" prints one task whole: steps, message histories and
every tool call. "toolmux logs export ID" prints it as MiroFlow-style task
JSON. See docs/tasklog.md.

Exit status: 0 success, 1 task not found (or an ambiguous id prefix) or
the log cannot be read, 2 usage or configuration error.`,
		Example: `  toolmux logs
  toolmux logs --status failed --limit 5
  toolmux logs show 01jq3v7c9d2k8m4n6p0r1s2t3v
  toolmux logs export 01jq3v7c9d2k8m4n6p0r1s2t3v > task.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st := tasklog.Status(status)
			if st != "" && !st.Valid() {
				return usageError("--status %q: want one of %s", status, statusList())
			}
			if limit < 0 {
				return usageError("--limit must not be negative")
			}
			l, err := a.openTaskLog(cmd.Context())
			if err != nil {
				return err
			}
			var (
				tasks []tasklog.TaskSummary
				ret   tasklog.RetentionStatus
			)
			if l != nil {
				defer l.Close()
				if tasks, err = l.Tasks(cmd.Context(), tasklog.Filter{Status: st, Limit: limit}); err != nil {
					return &exitError{code: exitFailed, err: fmt.Errorf("task log: %s", taskLogMessage(err))}
				}
				if ret, err = l.RetentionStatus(cmd.Context()); err != nil {
					return &exitError{code: exitFailed, err: fmt.Errorf("task log: %s", taskLogMessage(err))}
				}
			}
			if asJSON {
				if tasks == nil {
					tasks = []tasklog.TaskSummary{}
				}
				return writeJSON(a, tasks)
			}
			printTaskTable(a, tasks)
			printRetention(a, ret)
			return nil
		},
	}
	cmd.Flags().StringVar(&status, "status", "", "only tasks of this status: "+statusList())
	cmd.Flags().IntVarP(&limit, "limit", "n", 20, "at most this many tasks (0: all)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON array (for scripts)")
	cmd.AddCommand(a.logsShowCommand(), a.logsExportCommand())
	cmd.PersistentFlags().StringVar(&a.logsFleet.url, "nats", "", "read a fleet's task log (its journal on this NATS server, indexed under the data directory's fleet/)")
	cmd.PersistentFlags().StringVar(&a.logsFleet.prefix, "fleet-prefix", "toolmux", "the fleet's name on the NATS server")
	return cmd
}

func (a *app) logsShowCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Print one task: steps, messages and every tool call",
		Long: `Print everything the task log holds about one task: its status, times,
input and final answer, its step log, the message history of each agent
session, and every tool call with its server, tool, outcome, duration and
error kind. With --json, prints the whole structure, call records included.

ID may be the start of a task's id, as long as no other task's id starts
with it; an ambiguous start lists the tasks it could mean.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := a.taskDetail(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(a, d)
			}
			printTask(a, d)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the whole task as JSON")
	return cmd
}

func (a *app) logsExportCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "export ID",
		Short: "Print one task as MiroFlow-style task JSON (ID or a unique start of it)",
		Long: `Print one task in the JSON shape of MiroFlow's task log files (task_id,
status, input, final_boxed_answer, main_agent_message_history,
sub_agent_message_history_sessions, step_logs) with its tool calls, so
tools written for those files read it. See docs/tasklog.md.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := a.taskDetail(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return writeJSON(a, d.Export())
		},
	}
}

// openTaskLog opens the task log of the data directory; it returns nil and
// no error when there is none yet (nothing was ever logged), so reading
// commands do not create one.
func (a *app) openTaskLog(ctx context.Context) (*tasklog.Log, error) {
	cfg, err := a.loadConfig()
	if err != nil {
		return nil, err
	}
	dir := a.resolveDataDir(cfg)
	if dir == "" {
		return nil, usageError("no data directory: pass --data-dir or set data_dir in the configuration")
	}
	opts := toolmux.TaskLogOptions(cfg.TaskLog, a.logger())
	if a.logsFleet.url != "" {
		// A fleet's log: its journal on JetStream, the index kept where
		// serve keeps it for that fleet (built now if there is none).
		a.logsFleet.lease = 10 * time.Second
		fl, err := a.connectFleet(ctx, a.logsFleet, "toolmux logs", fleet.ConnectOptions{})
		if err != nil {
			return nil, err
		}
		j, err := fl.OpenJournal(ctx)
		if err != nil {
			fl.Close()
			return nil, &exitError{code: exitFailed, err: err}
		}
		a.cleanups = append(a.cleanups, func() { j.Close(); fl.Close() })
		dir = filepath.Join(dir, "fleet", a.logsFleet.prefix)
		opts = append(opts, tasklog.WithJournal(j))
	} else if !tasklog.Exists(dir) {
		return nil, nil
	}
	l, err := tasklog.Open(ctx, dir, opts...)
	if err != nil {
		return nil, &exitError{code: exitFailed, err: fmt.Errorf("task log: %s", taskLogMessage(err))}
	}
	return l, nil
}

// taskDetail reads one task, named by its id or a prefix of it that only
// its id starts with; a task not in the log (or no log), or an ambiguous
// prefix, exits 1.
func (a *app) taskDetail(ctx context.Context, id string) (*tasklog.TaskDetail, error) {
	l, err := a.openTaskLog(ctx)
	if err != nil {
		return nil, err
	}
	if l == nil {
		return nil, &exitError{code: exitFailed, err: errors.New(taskLogMessage(&tasklog.NotFoundError{Task: id}))}
	}
	defer l.Close()
	full, err := l.ResolveID(ctx, id)
	if err != nil {
		return nil, &exitError{code: exitFailed, err: errors.New(taskLogMessage(err))}
	}
	d, err := l.Detail(ctx, full)
	if err != nil {
		return nil, &exitError{code: exitFailed, err: errors.New(taskLogMessage(err))}
	}
	return d, nil
}

// taskLogMessage says what went wrong with the task log in the words of
// the command line, without the package's prefix.
func taskLogMessage(err error) string {
	if nf, ok := errors.AsType[*tasklog.NotFoundError](err); ok {
		return fmt.Sprintf("no task %q in the task log (toolmux logs lists the tasks)", nf.Task)
	}
	if ae, ok := errors.AsType[*tasklog.AmbiguousError](err); ok {
		var b strings.Builder
		fmt.Fprintf(&b, "%q is the start of several task ids; give more of the one you mean:", ae.Prefix)
		for _, c := range ae.Candidates {
			b.WriteString("\n  " + c)
		}
		if ae.More {
			b.WriteString("\n  …")
		}
		return b.String()
	}
	// The package's other errors begin with its name; the command speaks
	// of "the task log" instead.
	return strings.TrimPrefix(err.Error(), "tasklog: ")
}

func statusList() string {
	var s []string
	for _, st := range tasklog.Statuses() {
		s = append(s, string(st))
	}
	return strings.Join(s, ", ")
}

func writeJSON(a *app, v any) error {
	enc := json.NewEncoder(a.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

const timeLayout = "2006-01-02 15:04:05"

func printTaskTable(a *app, tasks []tasklog.TaskSummary) {
	if len(tasks) == 0 {
		fmt.Fprintln(a.stdout, "no tasks")
		return
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATUS\tCALLER\tSTARTED\tDURATION\tCALLS\tINPUT")
	for _, t := range tasks {
		calls := fmt.Sprint(t.Calls)
		if t.Errors > 0 {
			calls += fmt.Sprintf(" (%d failed)", t.Errors)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Status, orDash(t.Caller.String()), t.Created.Local().Format(timeLayout),
			taskDuration(t.Created, t.Ended), calls, orDash(oneLine(t.Input, 60)))
	}
	tw.Flush()
}

// printRetention says what retention has dropped, when it has dropped
// anything.
func printRetention(a *app, r tasklog.RetentionStatus) {
	if r.DroppedSegments == 0 && r.DroppedSpillFiles == 0 && r.DroppedTasks == 0 {
		return
	}
	keep := []string{}
	if r.MaxAge > 0 {
		keep = append(keep, ageString(r.MaxAge))
	}
	if r.MaxBytes > 0 {
		keep = append(keep, byteString(r.MaxBytes))
	}
	fmt.Fprintf(a.stdout, "\nretention: dropped %s, %s and %s (%s) since the journal began, the last at %s; keeping %s (now %s)\n",
		plural(int(r.DroppedTasks), "task"), plural(int(r.DroppedCalls), "call")+" of running tasks",
		plural(int(r.DroppedSpillFiles), "spill file"), byteString(r.DroppedBytes),
		r.LastDrop.Local().Format(timeLayout), orDash(strings.Join(keep, " and ")), byteString(r.Bytes))
}

func ageString(d time.Duration) string {
	if d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	return d.String()
}

func byteString(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	f, i := float64(n), 0
	for f >= unit && i < 4 {
		f /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", f, "KMGT"[i-1])
}

// taskDuration is how long a finished task took; "-" while it runs.
func taskDuration(start, end time.Time) string {
	if end.IsZero() {
		return "-"
	}
	return roundDuration(end.Sub(start)).String()
}

// roundDuration keeps durations readable: milliseconds under a second,
// tenths of a second under a minute, seconds above.
func roundDuration(d time.Duration) time.Duration {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond)
	case d < time.Minute:
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Second)
}

func printTask(a *app, d *tasklog.TaskDetail) {
	w := a.stdout
	fmt.Fprintf(w, "task      %s\n", d.ID)
	fmt.Fprintf(w, "status    %s\n", d.Status)
	if d.Caller != nil {
		fmt.Fprintf(w, "caller    %s (%s)\n", d.Caller.Name, d.Caller.Key)
	}
	fmt.Fprintf(w, "started   %s\n", d.Created.Local().Format(timeLayout))
	if !d.Ended.IsZero() {
		fmt.Fprintf(w, "ended     %s (%s)\n", d.Ended.Local().Format(timeLayout), taskDuration(d.Created, d.Ended))
	} else {
		fmt.Fprintf(w, "updated   %s\n", d.Updated.Local().Format(timeLayout))
	}
	if len(d.Metadata) > 0 {
		b, _ := json.Marshal(d.Metadata)
		fmt.Fprintf(w, "metadata  %s\n", b)
	}
	fmt.Fprintf(w, "input\n%s\n", indent(orNone(d.Input), "  "))
	if d.FinalAnswer != "" || !d.Ended.IsZero() {
		fmt.Fprintf(w, "answer\n%s\n", indent(orNone(d.FinalAnswer), "  "))
	}

	fmt.Fprintf(w, "\nsteps (%d)\n", len(d.Steps))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, s := range d.Steps {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", s.Time.Local().Format("15:04:05.000"), s.Level, s.Name, oneLine(s.Message, 80))
	}
	tw.Flush()

	fmt.Fprintf(w, "\nsessions (%d)\n", len(d.Sessions))
	for _, s := range d.Sessions {
		fmt.Fprintf(w, "  %s (%s)\n", s.Session, plural(len(s.Messages), "message"))
		for _, m := range s.Messages {
			line := oneLine(messageText(m.Content), 90)
			if len(m.ToolCalls) > 0 {
				line += " [tool calls]"
			}
			if m.ToolCallID != "" {
				line = "(" + m.ToolCallID + ") " + line
			}
			fmt.Fprintf(w, "    %-9s %s\n", m.Role, line)
		}
	}

	fmt.Fprintf(w, "\ncalls (%d)\n", len(d.Calls))
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, r := range d.Calls {
		state, kind, msg := callState(r)
		if r.Caller != nil && (d.Caller == nil || r.Caller.Key != d.Caller.Key) {
			// Made by another than the task's caller (one who sees
			// everything): said, the rest of the line as usual.
			if msg != "" {
				msg = "; " + msg
			}
			msg = "by " + r.Caller.Name + msg
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s/%s\t%s\t%s\t%s", r.Started.Local().Format("15:04:05.000"), orDash(r.Session),
			r.Server, r.Tool, state, roundDuration(r.Duration), orDash(kind))
		if msg != "" {
			// Only a non-empty last cell: tabwriter pads every cell a tab ends.
			fmt.Fprintf(tw, "\t%s", oneLine(msg, 60))
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}

// callState names a call's outcome as the scheduler does.
func callState(r *tool.Record) (state, kind, message string) {
	if r.Error == nil {
		return "success", "", ""
	}
	if r.Error.Kind == tool.KindCancelled {
		return "cancelled", string(r.Error.Kind), r.Error.Message
	}
	return "error", string(r.Error.Kind), r.Error.Message
}

// messageText renders a message's content for one line: the string, or
// the text of its parts with other parts named.
func messageText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return string(raw)
	}
	var out []string
	for _, p := range parts {
		if p.Type == "text" {
			out = append(out, p.Text)
		} else {
			out = append(out, "["+p.Type+"]")
		}
	}
	return strings.Join(out, " ")
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
