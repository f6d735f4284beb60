package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/toolmux/toolmux"
	"github.com/toolmux/toolmux/api"
	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/fleet"
	"github.com/toolmux/toolmux/vault"
)

// Users' own secrets for the servers that take them (a server's auth
// section of kind user_secrets; docs/identity.md "On whose behalf"). The
// commands are clients of a running toolmux serve: the serve knows who is
// calling (the key or token in $TOOLMUX_TOKEN) and keeps each caller's
// secrets in its vault under that caller, so that nobody sets, reads or
// deletes another's. A value is read from stdin, or a prompt that does not
// echo it, never from the command line, and is never printed.

// secretsFlags say which serve to talk to.
type secretsFlags struct {
	url string
}

func (f *secretsFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.url, "url", "", "the toolmux serve to talk to (default $TOOLMUX_URL, else http://127.0.0.1:8931)")
}

// maxSecretInput bounds what set reads from stdin: the vault's largest
// value (vault.max_value_bytes is at most 512KiB) and a line end.
const maxSecretInput = 512<<10 + 2

func (a *app) secretsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "secrets COMMAND",
		Short: "Set, list and delete your own secrets for the servers that take them",
		Long: `A server configured with auth: {kind: user_secrets, ...} is reached with
each user's own secrets (an API key sent as a header, or an environment
variable of the user's own process). These commands set, list and delete
yours, on a running toolmux serve, which keeps them in its vault,
encrypted, under your identity: the API key or access token in
$TOOLMUX_TOKEN. A value is read from stdin (or a prompt that does not
echo it) and never shown again. See docs/identity.md.

Exit status: 0 success; 1 refused by the serve (a server or secret that
does not exist, a value too large, a locked vault) or the serve could not
be reached; 2 usage error.`,
		Example: `  toolmux secrets set jira JIRA_TOKEN          # prompts for the value
  printf %s "$TOKEN" | toolmux secrets set jira JIRA_TOKEN
  toolmux secrets list
  toolmux secrets delete jira JIRA_TOKEN`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(a.secretsSetCommand(), a.secretsListCommand(), a.secretsDeleteCommand())
	return cmd
}

func (a *app) secretsSetCommand() *cobra.Command {
	var f secretsFlags
	cmd := &cobra.Command{
		Use:   "set SERVER NAME",
		Short: "Set your secret NAME for SERVER, read from stdin",
		Long: `Set your secret NAME for SERVER (as servers.SERVER.auth.secrets names it).
The value is read from stdin: on a terminal, from a prompt that does not
echo it; otherwise everything stdin holds, one line end at its end taken
off. Your open connection to the server, if any, is closed, so that your
next call uses the new value.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			value, err := a.readSecret(args[0], args[1])
			if err != nil {
				return err
			}
			body, _ := json.Marshal(map[string]string{"value": value})
			if err := f.do(cmd.Context(), http.MethodPut, secretPath(args[0], args[1]), body, nil); err != nil {
				return err
			}
			fmt.Fprintf(a.stderr, "toolmux: secret %s of server %s set\n", args[1], args[0])
			return nil
		},
	}
	f.add(cmd)
	return cmd
}

func (a *app) secretsListCommand() *cobra.Command {
	var f secretsFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the secrets the servers take, and which of yours are set",
		Long: `List the secrets each server with auth kind user_secrets takes, whether
you have set each, and when. Never a value. --json prints the serve's
answer: {"secrets": [{"server", "name", "set", "updated", "configured"}]}.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var out struct {
				Secrets []api.SecretInfo `json:"secrets"`
			}
			if err := f.do(cmd.Context(), http.MethodGet, "/api/secrets", nil, &out); err != nil {
				return err
			}
			if asJSON {
				return writeJSON(a, out)
			}
			if len(out.Secrets) == 0 {
				fmt.Fprintln(a.stdout, "no server takes users' secrets")
				return nil
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "SERVER\tSECRET\tSET")
			for _, s := range out.Secrets {
				set := "no: toolmux secrets set " + s.Server + " " + s.Name
				if s.Set {
					set = s.Updated.Local().Format(time.DateTime)
				}
				if !s.Configured {
					set += " (the server no longer takes it)"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Server, s.Name, set)
			}
			return tw.Flush()
		},
	}
	f.add(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func (a *app) secretsDeleteCommand() *cobra.Command {
	var f secretsFlags
	cmd := &cobra.Command{
		Use:   "delete SERVER NAME",
		Short: "Delete your secret NAME for SERVER",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.do(cmd.Context(), http.MethodDelete, secretPath(args[0], args[1]), nil, nil); err != nil {
				return err
			}
			fmt.Fprintf(a.stderr, "toolmux: secret %s of server %s deleted\n", args[1], args[0])
			return nil
		},
	}
	f.add(cmd)
	return cmd
}

func secretPath(server, name string) string {
	return "/api/secrets/" + url.PathEscape(server) + "/" + url.PathEscape(name)
}

// readSecret reads a value: from a prompt without echo on a terminal,
// else from all of stdin, bounded, one line end at its end taken off.
func (a *app) readSecret(server, name string) (string, error) {
	if f, ok := a.stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprintf(a.stderr, "value of secret %s for server %s (not shown): ", name, server)
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(a.stderr)
		if err != nil {
			return "", &exitError{code: exitFailed, err: fmt.Errorf("reading the value: %w", err)}
		}
		return string(b), nil
	}
	b, err := io.ReadAll(io.LimitReader(a.stdin, maxSecretInput+1))
	if err != nil {
		return "", &exitError{code: exitFailed, err: fmt.Errorf("reading the value from stdin: %w", err)}
	}
	if len(b) > maxSecretInput {
		return "", usageError("the value on stdin is longer than %d bytes", maxSecretInput-2)
	}
	s := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if s == "" {
		return "", usageError("no value on stdin (pipe it in, or run on a terminal to be prompted)")
	}
	return s, nil
}

// do makes one request of the serve's API as the caller $TOOLMUX_TOKEN
// names, decoding a JSON answer into out (nil: none expected).
func (f *secretsFlags) do(ctx context.Context, method, path string, body []byte, out any) error {
	base := f.url
	if base == "" {
		base = os.Getenv("TOOLMUX_URL")
	}
	if base == "" {
		base = "http://127.0.0.1:8931"
	}
	if u, err := url.Parse(base); err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return usageError("--url: %q is not an http:// or https:// URL", base)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(base, "/")+path, bytes.NewReader(body))
	if err != nil {
		return usageError("--url: %v", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if tok := os.Getenv("TOOLMUX_TOKEN"); tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return &exitError{code: exitFailed, err: fmt.Errorf("reaching toolmux serve at %s: %w", base, errors.Unwrap(err))}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if resp.StatusCode >= 300 {
		var e struct {
			Error struct{ Kind, Message string }
		}
		msg := strings.TrimSpace(string(b))
		if json.Unmarshal(b, &e) == nil && e.Error.Message != "" {
			msg = e.Error.Message
		}
		if resp.StatusCode == http.StatusUnauthorized {
			msg += " (set TOOLMUX_TOKEN to your API key or access token)"
		}
		return &exitError{code: exitFailed, err: fmt.Errorf("toolmux serve at %s: %s", base, msg)}
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return &exitError{code: exitFailed, err: fmt.Errorf("toolmux serve at %s answered what is not JSON: %w", base, err)}
		}
	}
	return nil
}

// serveVault is the vault of serve, whose secrets and tokens the servers
// with an auth section are reached with: in a fleet (fl set), the fleet's
// bucket, which its workers read too; else the data directory's (nil
// when there is none). A key configured that cannot be read stops serve
// when a server takes users' secrets or tokens, and leaves the vault out
// otherwise (said on stderr).
func (a *app) serveVault(ctx context.Context, cfg *config.Config, fl *fleet.Fleet) (*vault.Vault, error) {
	dir := a.resolveDataDir(cfg)
	if dir == "" && fl == nil {
		return nil, nil
	}
	ring, err := vault.KeysFromConfig(cfg.Vault).Load(os.LookupEnv)
	if err != nil {
		if s := authServer(cfg); s != "" {
			return nil, &exitError{code: exitFailed, err: fmt.Errorf("the vault, which server %s's users' secrets or tokens are kept in: %w", s, err)}
		}
		fmt.Fprintf(a.stderr, "toolmux: the vault is left out: %v\n", err)
		return nil, nil
	}
	opts := vault.OptionsFromConfig(cfg.Vault)
	if fl == nil {
		return vault.New(vault.NewFileStore(vault.Dir(dir)), ring, opts), nil
	}
	s, err := openFleetVault(ctx, fl, opts)
	if err != nil {
		if s := authServer(cfg); s != "" {
			return nil, &exitError{code: exitFailed, err: fmt.Errorf("the fleet's vault, which server %s's users' secrets or tokens are kept in: %w", s, err)}
		}
		fmt.Fprintf(a.stderr, "toolmux: the vault is left out: the fleet's: %v\n", err)
		return nil, nil
	}
	if dir != "" {
		a.sayFileVaultLeft(ctx, dir, s)
	}
	return vault.New(s, ring, opts), nil
}

// sayFileVaultLeft says, when the data directory's vault holds entries,
// that a gateway in a fleet does not read them, and how to copy them into
// the fleet's (docs/vault.md "In a fleet").
func (a *app) sayFileVaultLeft(ctx context.Context, dir string, bucket fmt.Stringer) {
	fs := vault.NewFileStore(vault.Dir(dir))
	st, err := vault.New(fs, nil, vault.Options{}).Status(ctx)
	if err != nil || st.Entries == 0 {
		return
	}
	fmt.Fprintf(a.stderr, "toolmux: in a fleet, users' secrets and tokens are kept in the fleet's vault (%s); the data directory's vault (%s: %s of %s) "+
		"is not read: toolmux vault copy --nats URL copies it into the fleet's (docs/vault.md \"In a fleet\")\n", bucket, fs.Dir(), pluralEntries(st.Entries), plural(st.Owners, "owner"))
}

// authServer is the first server (or API) that takes its users' secrets
// or tokens from the vault (auth kind user_secrets or oauth); "" when
// none.
func authServer(cfg *config.Config) string {
	for _, sc := range cfg.Servers {
		if sc.Auth != nil && (sc.Auth.Kind == config.AuthUserSecrets || sc.Auth.Kind == config.AuthOAuth) {
			return sc.Name
		}
	}
	for _, a := range cfg.OpenAPI {
		if a.Auth != nil {
			return a.Name
		}
	}
	return ""
}

// secretsAPI is what /api/secrets serves: the vault's secrets of the
// runtime's servers; nil without a vault. given is told of a user's
// secret set or changed (the gateway: calls waiting for it go on).
func secretsAPI(rt *toolmux.Runtime, v *vault.Vault, given func(owner, server string)) *api.Secrets {
	if v == nil {
		return nil
	}
	return &api.Secrets{Vault: v, Needed: rt.UserSecrets, MaxValueBytes: v.Options().WithDefaults().MaxValueBytes,
		Changed: func(owner, server string) {
			rt.DisconnectCaller(server, owner)
			given(owner, server)
		}}
}
