// Package upstreamauth makes the gateway an OAuth client of its upstream
// MCP servers on behalf of each caller, as the MCP authorization
// specification asks of a client: an upstream that answers 401 with
// protected resource metadata is called with a token of the caller's own,
// never with the caller's token to the gateway (which the specification
// forbids passing through), and never with one credential shared by all
// callers (whom the upstream could then not tell apart).
//
// For an upstream (Upstream, Client.Add) and a caller (the vault owner:
// identity.Caller.Key()), Client.Token, Client.TokenSource and
// Client.Transport give the caller's token, kept in the vault
// (vault.PutToken) and refreshed when it has less than Options.Leeway to
// live. With no token, or one whose refresh the authorization server
// refused (which deletes it), they fail with an *Error of
// KindAuthRequired whose URL is where to send the user: the gateway
// carries it to the caller (a URL elicitation, an input_required question,
// the page's "Connect"), the user authorizes at their authorization
// server, which sends the browser to the gateway's callback route
// (Client.Callback), which completes the authorization and keeps the
// token. The next call goes through. Client.Authorize gives the URL
// without a call (the page's "Connect"); Client.Revoke disconnects a user
// (the token revoked at the authorization server, RFC 7009, and deleted).
//
// What it does is the specification's, with its libraries, not
// hand-written: discovery with the go-sdk's oauthex (the upstream's
// challenge and RFC 9728 metadata, then RFC 8414 or OpenID Connect
// discovery of its authorization server); the client registered in the
// specification's order (a client configured for the upstream, a Client
// ID Metadata Document served by the gateway (Client.MetadataDocument)
// when the server supports them, else dynamic registration (RFC 7591,
// oauthex.RegisterClient), done once per upstream and kept, sealed, in the
// vault (VaultRegistrations)); the authorization code grant with PKCE
// (S256) and the resource indicator (RFC 8707) of the upstream, by
// golang.org/x/oauth2.
//
// Its promises:
//
//   - a callback's state is random, used once (a second use, or one in
//     another caller's session than the one who started it, is refused),
//     expires (Options.StateTTL), and the authorizations waiting for theirs
//     are bounded (Options.MaxPending, one more refused with
//     KindTooManyPending); a caller asked again while one is waiting gets
//     the same URL;
//   - the calls of one caller to one upstream at once refresh once (in a
//     process): a server that rotates refresh tokens would take a second
//     refresh with the same one for a replay;
//   - no credential (token, code, verifier, client secret) is in a log
//     line or an error: the tokens and registrations redact themselves
//     when formatted.
//
// Discovery follows the go-sdk's guard against server-side request
// forgery: metadata at an address of a private network (10.0.0.0/8, ...)
// is refused unless Options.HTTPClient has a transport of its own (one
// that dials as it likes); https is required but on loopback.
//
// What it leaves to its user: which caller a request is for (the
// per-caller connections), the route the callback is mounted on (its URL
// is Options.RedirectURL), and how the authorization URL reaches the
// user. Pending authorizations are kept in memory: after a restart the
// user is asked again; tokens and registrations are in the vault.
//
// A client beside the gateway on the same vault (a fleet's worker, whose
// callback route no browser reaches) is made with Options.Elsewhere: it
// uses and refreshes the tokens the vault holds, with the gateway's
// registrations, and never starts an authorization nor registers a
// client; a caller without a usable token is told where to authorize.
//
// The user documentation is docs/identity.md, "Per-user OAuth"; serve
// mounts the routes (CallbackPath, MetadataPath) and reads the
// upstream_oauth section (OptionsFromConfig), and package percaller's
// OAuth credential sends each caller's token on their own connection.
package upstreamauth
