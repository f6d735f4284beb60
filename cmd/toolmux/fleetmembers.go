package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/spf13/cobra"

	"github.com/toolmux/toolmux/fleet"
	"github.com/toolmux/toolmux/tool"
)

// A fleet's members (docs/fleet.md "Members"): the workers and the
// submitters that connect to the fleet's NATS server with nkeys of their
// own, kept by the gateway in its data directory's fleet/members.json.
// `toolmux fleet` writes the file; serve follows it while it runs (its
// NATS server's users, the fleet's members bucket).

func (a *app) fleetCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fleet COMMAND",
		Short: "Add, list and remove the members of the gateway's fleet",
		Long: `A fleet's members connect to its NATS server with nkeys of their own rather
than one shared token: each worker and each submitter has its key, and the
server holds each to what its role may do. A worker takes runs and cannot
submit one; a submitter submits runs as itself and reads its own runs'
states and events, nobody else's; the workers run each run for its
submitter, with its groups' policy, and its calls are recorded as its.

The gateway (toolmux serve --nats-listen, or --nats) keeps the members in
its data directory's fleet/members.json: their names, roles, groups and
public keys, never a seed. A running serve lets a member in, or shuts it
out, within a second, without a restart. See docs/fleet.md.

Exit status: 0 success; 1 no member of that name, a member of that name
or key already, or a members' file that cannot be used; 2 usage error.`,
		Example: `  toolmux fleet add builder-1 --role worker > builder-1.nk
  toolmux fleet add alice --role submitter --group dev > alice.nk
  toolmux fleet list
  toolmux fleet remove builder-1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(a.fleetAddCommand(), a.fleetListCommand(), a.fleetRemoveCommand(), a.fleetNKeyCommand(), a.fleetNATSConfigCommand())
	return cmd
}

// listMembers is the fleet's members of the data directory.
func (a *app) listMembers() ([]fleet.Member, error) {
	store, err := a.memberStore()
	if err != nil {
		return nil, err
	}
	ms, err := store.List()
	if err != nil {
		return nil, membersError(err)
	}
	return ms, nil
}

// memberStore is the fleet's members of the data directory.
func (a *app) memberStore() (*fleet.MemberStore, error) {
	cfg, err := a.loadConfig()
	if err != nil {
		return nil, err
	}
	dir := a.resolveDataDir(cfg)
	if dir == "" {
		return nil, usageError("no data directory to keep the fleet's members in: pass --data-dir or set data_dir in the configuration")
	}
	return fleet.NewMemberStore(membersPath(dir)), nil
}

func (a *app) fleetAddCommand() *cobra.Command {
	var (
		role    string
		groups  []string
		nkey    string
		replace bool
	)
	cmd := &cobra.Command{
		Use:   "add NAME --role worker|submitter|gateway",
		Short: "Add a member to the fleet; print its seed file, once",
		Long: `Add a member named NAME (1 to 64 letters, digits, '-', '_') with --role:
worker (takes and runs runs), submitter (submits runs as itself: runs
--nats, submit, runs) or gateway (everything: a gateway of the fleet on an
external NATS server).

Without --nkey, a key is made for it and its seed file printed on stdout,
alone: it is shown only now, the fleet keeps its public key. Give it to
the member, readable by it only (chmod 600), who connects with
--nats-creds FILE. With --nkey, the public key of a seed made where the
member runs (toolmux fleet nkey FILE, or nk -gen user) is registered, and
no seed ever leaves that machine.

A submitter's runs are those of the caller of its name (the API key of
that name sees them as its own) in the groups of --group: the workers hold
them to those groups' policy, approval modes and tools. A running serve
lets the member in within a second.`,
		Example: `  toolmux fleet add builder-1 --role worker > builder-1.nk
  toolmux fleet add alice --role submitter --group dev > alice.nk
  toolmux fleet add bob --role submitter --nkey UD6...`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			m := fleet.Member{Name: args[0], Role: fleet.Role(role), Groups: groups, NKey: nkey}
			var seed []byte
			if nkey == "" {
				var err error
				if seed, m.NKey, err = fleet.NewSeed(fmt.Sprintf("fleet member %s (%s)", m.Name, m.Role)); err != nil {
					return &exitError{code: exitInternal, err: err}
				}
			}
			if err := fleet.CheckMember(m); err != nil {
				return usageError("%v", err)
			}
			if m.Role != fleet.RoleSubmitter && len(groups) > 0 {
				return usageError("--group: only a submitter's runs are held to groups (a %s has none)", m.Role)
			}
			store, err := a.memberStore()
			if err != nil {
				return err
			}
			replaced, err := store.Add(m, replace)
			if err != nil {
				return membersError(err)
			}
			what := "added"
			if replaced {
				what = "replaced (its old key no longer works)"
			}
			if seed != nil {
				a.stdout.Write(seed)
				fmt.Fprintf(a.stderr, "toolmux: fleet member %s (%s%s) %s in %s; its seed file is on stdout, shown only now: "+
					"give it to the member, readable by it only (chmod 600), which connects with --nats-creds FILE\n",
					m.Name, m.Role, groupsNote(m), what, store.Path())
				return nil
			}
			fmt.Fprintf(a.stderr, "toolmux: fleet member %s (%s%s, key %s) %s in %s; it connects with --nats-creds and its own seed file\n",
				m.Name, m.Role, groupsNote(m), m.NKey, what, store.Path())
			return nil
		},
	}
	cmd.Flags().StringVar(&role, "role", "", "what the member does: worker, submitter or gateway (required)")
	cmd.Flags().StringSliceVar(&groups, "group", nil, "a group of a submitter's (repeatable, or comma-separated): its runs are held to its groups' policy")
	cmd.Flags().StringVar(&nkey, "nkey", "", "the member's public nkey (U…), of a seed made where it runs; default: make one and print its seed file")
	cmd.Flags().BoolVar(&replace, "replace", false, "replace the member of that name, if there is one (its old key stops working)")
	_ = cmd.MarkFlagRequired("role")
	return cmd
}

func groupsNote(m fleet.Member) string {
	if len(m.Groups) == 0 {
		return ""
	}
	return ", groups " + strings.Join(m.Groups, ", ")
}

func (a *app) fleetListCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the fleet's members: name, role, groups, key",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ms, err := a.listMembers()
			if err != nil {
				return err
			}
			if asJSON {
				if ms == nil {
					ms = []fleet.Member{}
				}
				return writeJSON(a, ms)
			}
			if len(ms) == 0 {
				fmt.Fprintln(a.stdout, "no fleet members (toolmux fleet add NAME --role worker|submitter adds one)")
				return nil
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tROLE\tGROUPS\tNKEY\tADDED")
			for _, m := range ms {
				added := "-"
				if !m.Created.IsZero() {
					added = m.Created.Local().Format(timeLayout)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", m.Name, m.Role, orDash(strings.Join(m.Groups, ",")), m.NKey, added)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON array (for scripts)")
	return cmd
}

func (a *app) fleetRemoveCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "remove NAME",
		Short: "Remove a member: its key stops working",
		Long: `Remove the member named NAME. A running serve disconnects it and refuses its
key within a second, without a restart; a run it submitted that no worker
has taken yet fails, saying its submitter is no member any more.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			store, err := a.memberStore()
			if err != nil {
				return err
			}
			if err := store.Remove(args[0]); err != nil {
				return membersError(err)
			}
			fmt.Fprintf(a.stderr, "toolmux: fleet member %s removed; a running toolmux serve shuts it out within %s\n", args[0], memberRecheck)
			return nil
		},
	}
}

func (a *app) fleetNKeyCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "nkey FILE",
		Short: "Make a member's key here: its seed file, and print its public key",
		Long: `Make an nkey for a member where it runs: its seed is written to FILE (mode
0600; an existing file is not overwritten) and its public key printed on
stdout, for the gateway's toolmux fleet add NAME --nkey KEY. The seed never
leaves this machine.`,
		Example: `  toolmux fleet nkey ~/.config/toolmux/worker.nk     # then, on the gateway:
  toolmux fleet add builder-1 --role worker --nkey UD6...`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			seed, pub, err := fleet.NewSeed("a fleet member made here")
			if err != nil {
				return &exitError{code: exitInternal, err: err}
			}
			f, err := os.OpenFile(args[0], os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if errors.Is(err, os.ErrExist) {
				return &exitError{code: exitFailed, err: fmt.Errorf("%s exists already: a seed is not overwritten (remove it first)", args[0])}
			}
			if err != nil {
				return &exitError{code: exitFailed, err: err}
			}
			_, err = f.Write(seed)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				os.Remove(args[0])
				return &exitError{code: exitFailed, err: err}
			}
			fmt.Fprintln(a.stdout, pub)
			fmt.Fprintf(a.stderr, "toolmux: seed written to %s (readable by you only); register its key on the gateway: "+
				"toolmux fleet add NAME --role worker|submitter --nkey %s\n", args[0], pub)
			return nil
		},
	}
}

func (a *app) fleetNATSConfigCommand() *cobra.Command {
	var prefix string
	cmd := &cobra.Command{
		Use:   "nats-config",
		Short: "Print the NATS server authorization of the fleet's members",
		Long: `Print, as JSON (which a NATS server's configuration file reads), the
authorization block of an external NATS server for the fleet's members:
each member's public key with its role's permissions. Include it in the
server's configuration, and reload it (nats-server --signal reload) after
every toolmux fleet add or remove; the gateway connects as a member of
role gateway. docs/fleet.md says what each permission is for.`,
		Example: `  toolmux fleet nats-config > /etc/nats/toolmux-members.conf   # include toolmux-members.conf`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ms, err := a.listMembers()
			if err != nil {
				return err
			}
			type user struct {
				NKey        string              `json:"nkey"`
				Permissions *server.Permissions `json:"permissions"`
			}
			users := []user{}
			for _, m := range ms {
				users = append(users, user{NKey: m.NKey, Permissions: fleet.Permissions(fleet.Options{Prefix: prefix}, m)})
			}
			// Subjects hold '>': not escaped (\u003e), which a NATS
			// configuration does not read.
			enc := json.NewEncoder(a.stdout)
			enc.SetEscapeHTML(false)
			enc.SetIndent("", "  ")
			return enc.Encode(map[string]any{"authorization": map[string]any{"users": users}})
		},
	}
	cmd.Flags().StringVar(&prefix, "fleet-prefix", "toolmux", "the fleet's name on the NATS server (its subjects, streams and buckets)")
	return cmd
}

// membersError is the exit of a fleet command whose store refused.
func membersError(err error) error {
	if nf, ok := errors.AsType[*fleet.MemberNotFoundError](err); ok {
		msg := nf.Error()
		if sug := tool.Closest(nf.Name, nf.Names); sug != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", sug)
		}
		return &exitError{code: exitFailed, err: errors.New(msg + "; toolmux fleet list lists them")}
	}
	if ex, ok := errors.AsType[*fleet.MemberExistsError](err); ok {
		if ex.Other != "" {
			return &exitError{code: exitFailed, err: ex}
		}
		return &exitError{code: exitFailed, err: errors.New(ex.Error() + ": remove it first, or add --replace")}
	}
	if _, ok := errors.AsType[*fleet.MemberError](err); ok {
		return usageError("%v", err)
	}
	return &exitError{code: exitFailed, err: err}
}
