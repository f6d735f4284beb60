package upstreamauth

import "errors"

// Kind says what went wrong, for errors.As and a caller's decision:
// KindAuthRequired sends the user to Error.URL; the others are the
// gateway's or the upstream's problems, or a bad callback.
type Kind string

const (
	// KindAuthRequired: the caller has no usable token for the server (none
	// yet, or its refresh was refused): the user must authorize toolmux at
	// Error.URL, the authorization server's page.
	KindAuthRequired Kind = "auth_required"
	// KindTooManyPending: Options.MaxPending authorizations are waiting for
	// their callback already; no new one is started until one completes or
	// expires.
	KindTooManyPending Kind = "too_many_pending"
	// KindUnknownServer: no upstream of that name was added.
	KindUnknownServer Kind = "unknown_server"
	// KindDiscovery: the upstream's protected resource metadata or its
	// authorization server's metadata could not be had, or are unusable.
	KindDiscovery Kind = "discovery"
	// KindRegistration: no client could be registered at the authorization
	// server (none pre-registered, no Client ID Metadata Document support,
	// no dynamic registration, or the registration was refused).
	KindRegistration Kind = "registration"
	// KindState: a callback's state is unknown, used already or expired.
	KindState Kind = "state"
	// KindWrongCaller: a callback came in a session of another caller than
	// the one who started the authorization.
	KindWrongCaller Kind = "wrong_caller"
	// KindDenied: the authorization server sent an error to the callback
	// (the user refused, say), or a callback without a code.
	KindDenied Kind = "denied"
	// KindExchange: the authorization server refused the code, or a refresh
	// failed for another reason than a refused grant.
	KindExchange Kind = "exchange"
	// KindVault: the vault failed (locked, full, ...): Err says how.
	KindVault Kind = "vault"
)

// Error is an error of this package. It never holds a credential: not a
// token, a code, a client secret or a PKCE verifier.
type Error struct {
	Kind Kind
	// Server is the upstream's name.
	Server string
	// URL, for KindAuthRequired, is where to send the user to authorize.
	URL string
	// Message says what went wrong, for a person.
	Message string
	// Err is the cause, if any.
	Err error
}

func (e *Error) Error() string {
	s := e.Message
	if e.Server != "" {
		s = "upstream " + e.Server + ": " + s
	}
	if e.Kind == KindAuthRequired && e.URL != "" {
		s += ": authorize at " + e.URL
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// KindOf returns the kind of an *Error in err's chain, or "".
func KindOf(err error) Kind {
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Kind
	}
	return ""
}

// AuthorizationURL returns the URL of an authorization-required error in
// err's chain; ok is false for any other error.
func AuthorizationURL(err error) (url string, ok bool) {
	if e, found := errors.AsType[*Error](err); found && e.Kind == KindAuthRequired {
		return e.URL, true
	}
	return "", false
}
