package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmux/toolmux/identity"
	"github.com/toolmux/toolmux/tool"
)

// A call whose server takes each caller's own credential, made by a
// caller who has not given it, ends auth_required with the URL where the
// caller's user gives it (tool.Error.URL: the page's secrets, an
// authorization server's page). The gateway sends the user there through
// the channel the client has (docs/gateway.md, "Sending a caller to give
// a credential"):
//
//   - a session of 2025-11-25 whose client declared URL-mode elicitation
//     is asked on the call's own stream (elicitation/create, mode "url");
//     once its user accepted, the call waits for the credential (serve
//     tells the gateway when a user's credential changes:
//     CredentialGiven), at most AuthTimeout, and is made once more;
//   - a 2026-07-28 request whose client declared it is answered
//     input_required with that elicitation; the client's retry, carrying
//     the answer, makes the call again (the answers to the call's other
//     questions, its approval, ride along in requestState);
//   - any other client gets the error as a tool result whose text names
//     the URL.
//
// The URL is in what is sent to the client only: never in the record, an
// event or an MCP task's result kept in the task log (an authorization
// URL holds a single-use state meant for one user).

// authKeyPrefix begins the key of a credential question in inputRequests.
const authKeyPrefix = "toolmux-auth-"

// authStatePrefix begins a requestState the gateway wrote: the answers of
// the request's other questions, carried to its retry.
const authStatePrefix = "toolmux-answers."

// needsAuth returns the error of a call that needs its caller's
// credential and says where to give it; nil for any other record.
func needsAuth(rec *tool.Record) *tool.Error {
	if rec == nil || rec.Error == nil || rec.Error.Kind != tool.KindAuthRequired || rec.Error.URL == "" {
		return nil
	}
	return rec.Error
}

// urlElicits reports whether the request's client declared URL-mode
// elicitation, and whether it answers by retrying (2026-07-28).
func (r *request) urlElicits() (ok, modern bool) {
	p := r.initParams()
	if p == nil || p.Capabilities == nil || p.Capabilities.Elicitation == nil || p.Capabilities.Elicitation.URL == nil {
		return false, false
	}
	return true, p.ProtocolVersion >= multiRoundTrip
}

// authKey names the credential question of a server: a retry finds its
// answer under it whatever URL the question carried.
func authKey(server string) string {
	sum := sha256.Sum256([]byte(server))
	return authKeyPrefix + hex.EncodeToString(sum[:8])
}

// authQuestion is the URL-mode elicitation sending the user to e.URL.
func authQuestion(e *tool.Error) *mcp.ElicitParams {
	return &mcp.ElicitParams{
		Mode:          "url",
		Message:       fmt.Sprintf("toolmux: server %s needs your own credential before %s can be called. Open the link to give it; the call goes on once you have.", e.Server, e.Server+"/"+e.Tool),
		URL:           e.URL,
		ElicitationID: tool.NewID(),
	}
}

// authText is the sentence added, in what is sent to the client only, to
// the text of an auth_required error: where to give the credential.
func authText(e *tool.Error) string {
	return fmt.Sprintf("To give it, open %s (in a browser, as the same user), then call the tool again.", e.URL)
}

// sentResult is the result sent to the client for rec: toMCP's, with the
// URL of an auth_required error named in its text.
func sentResult(rec *tool.Record) *mcp.CallToolResult {
	res := toMCP(rec)
	if e := needsAuth(rec); e != nil {
		res.Content = append(res.Content, &mcp.TextContent{Text: authText(e)})
	}
	return res
}

// authOutcome is what asking for a credential came to.
type authOutcome int

const (
	// authNotAsked: the client cannot be asked, or was asked already
	// (the retry of a 2026-07-28 request answered it): the error goes
	// to the client as it is.
	authNotAsked authOutcome = iota
	// authAsked: the question was left for a 2026-07-28 client
	// (input_required).
	authAsked
	// authGiven: a session's user accepted, and the credential came or
	// the wait ended: the call is made once more.
	authGiven
)

// authorize sends the user of the call's client to give the credential e
// asks for, through the channel the client has.
func (g *Gateway) authorize(ctx context.Context, r *request, e *tool.Error) authOutcome {
	ok, modern := r.urlElicits()
	if !ok {
		return authNotAsked
	}
	key := authKey(e.Server)
	if modern {
		if _, answered := r.answers[key]; answered {
			return authNotAsked // the call was made again with the answer
		}
		r.ask(key, authQuestion(e))
		return authAsked
	}
	// Watch before asking: the credential may be given before the
	// client's answer comes back.
	owner := ""
	if c := identity.From(ctx); c != nil {
		owner = c.Key()
	}
	given, stop := g.creds.watch(owner, e.Server)
	defer stop()
	q := authQuestion(e)
	elicit := r.elicit
	if elicit == nil {
		if r.session == nil {
			return authNotAsked
		}
		elicit = r.session.Elicit
	}
	ectx, cancel := context.WithTimeout(ctx, g.authTimeout)
	defer cancel()
	res, err := elicit(ectx, q)
	if err != nil || res.Action != "accept" {
		// Declined, dismissed, unanswered or not shown: the error
		// names the URL all the same.
		return authNotAsked
	}
	if g.awaitCreds {
		// "accept" is the user's consent to open the URL, not the end
		// of what they do there (MCP 2025-11-25, URL mode).
		select {
		case <-given:
			// The spec's completion notice, to the client that was
			// asked; the call goes on meanwhile.
			if r.session != nil {
				_ = r.session.NotifyElicitationComplete(ctx, &mcp.ElicitationCompleteParams{ElicitationID: q.ElicitationID})
			}
		case <-ectx.Done():
			if ctx.Err() != nil {
				return authNotAsked
			}
		}
	}
	return authGiven
}

// credWatch wakes the calls waiting for a caller's credential for a
// server (after their client's user accepted to give it).
type credWatch struct {
	mu      sync.Mutex
	waiters map[credKey][]chan struct{}
}

type credKey struct{ owner, server string }

// watch returns a channel closed when owner's credential for server is
// given, and the function that stops watching.
func (w *credWatch) watch(owner, server string) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	k := credKey{owner, server}
	w.mu.Lock()
	if w.waiters == nil {
		w.waiters = map[credKey][]chan struct{}{}
	}
	w.waiters[k] = append(w.waiters[k], ch)
	w.mu.Unlock()
	return ch, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		ws := w.waiters[k]
		for i, c := range ws {
			if c == ch {
				ws = append(ws[:i], ws[i+1:]...)
				break
			}
		}
		if len(ws) == 0 {
			delete(w.waiters, k)
		} else {
			w.waiters[k] = ws
		}
	}
}

// given wakes the watchers of owner's credential for server.
func (w *credWatch) given(owner, server string) {
	k := credKey{owner, server}
	w.mu.Lock()
	ws := w.waiters[k]
	delete(w.waiters, k)
	w.mu.Unlock()
	for _, c := range ws {
		close(c)
	}
}

// CredentialGiven tells the gateway that the user whose key is owner
// ("" without authentication) has given (or changed) a credential for
// server: its calls waiting for it, after their client's user accepted
// to open the URL, are made again now.
func (g *Gateway) CredentialGiven(owner, server string) { g.creds.given(owner, server) }

// authState is the requestState of a credential question: the answers
// the request carried to its other questions (its approval), so that its
// retry, which carries only the answer to this one, has them too.
func authState(answers mcp.InputResponseMap) string {
	keep := mcp.InputResponseMap{}
	for k, v := range answers {
		if !strings.HasPrefix(k, authKeyPrefix) {
			keep[k] = v
		}
	}
	if len(keep) == 0 {
		return ""
	}
	b, err := json.Marshal(keep)
	if err != nil {
		return ""
	}
	return authStatePrefix + base64.RawURLEncoding.EncodeToString(b)
}

// withState returns the answers of a request: those it carries, and
// those its requestState carried from the request it retries (the
// request's own win). A requestState the gateway did not write, or that
// does not decode, adds nothing: it is the client's as much as the
// answers it sends.
func withState(answers mcp.InputResponseMap, state string) mcp.InputResponseMap {
	rest, ok := strings.CutPrefix(state, authStatePrefix)
	if !ok {
		return answers
	}
	b, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil {
		return answers
	}
	var carried mcp.InputResponseMap
	if json.Unmarshal(b, &carried) != nil || len(carried) == 0 {
		return answers
	}
	out := maps.Clone(carried)
	maps.Copy(out, answers)
	return out
}
