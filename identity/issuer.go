package identity

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
)

// issuer is one identity provider as the verifiers reach it: its
// discovery document (found once, tried again after a failure no sooner
// than the refetch interval), its keys (go-oidc's RemoteKeySet, fetched
// through keysTransport), its introspection endpoint.
type issuer struct {
	cfg    Issuer
	opts   TokenOptions
	client *http.Client

	mu       sync.Mutex
	meta     *discovery // nil until found
	metaErr  error      // the last failure, said again until metaNext
	metaNext time.Time
	keys     *oidc.RemoteKeySet
}

// discovery is what the verifiers read of an issuer's discovery document.
type discovery struct {
	Issuer                string `json:"issuer"`
	JWKSURI               string `json:"jwks_uri"`
	IntrospectionEndpoint string `json:"introspection_endpoint"`
}

func newIssuer(cfg Issuer, o TokenOptions) *issuer {
	return &issuer{cfg: cfg, opts: o, client: &http.Client{Transport: o.Transport, Timeout: o.Timeout}}
}

// unavailableError says an issuer could not be reached, or did not answer
// as it should: a token it would judge cannot be judged now (KindUnavailable).
type unavailableError struct {
	issuer string
	what   string // what was asked: "its keys", "its discovery document" ...
	err    error
}

func (e *unavailableError) Error() string {
	return fmt.Sprintf("%s of issuer %s: %v", e.what, e.issuer, e.err)
}

func (e *unavailableError) Unwrap() error { return e.err }

// unavailable is the refusal of a token whose issuer could not be asked.
// Its message says no more (what failed, at which address, is in Err, for
// the operator).
func unavailable(err error) *Error {
	return &Error{Kind: KindUnavailable, Message: "the token cannot be checked now: its issuer did not answer; try again later", Err: err}
}

// discover returns the issuer's discovery document: OpenID Connect
// Discovery's (ISSUER/.well-known/openid-configuration), else RFC 8414's
// (the well-known path inserted before the issuer's path). Its issuer must
// be the one configured (both specifications say so: a document naming
// another would hand its keys to this one's tokens).
func (is *issuer) discover(ctx context.Context) (*discovery, error) {
	is.mu.Lock()
	defer is.mu.Unlock()
	if is.meta != nil {
		return is.meta, nil
	}
	now := is.opts.Now()
	if is.metaErr != nil && now.Before(is.metaNext) {
		return nil, is.metaErr
	}
	d, err := is.fetchDiscovery(ctx)
	if err != nil {
		is.metaErr, is.metaNext = err, now.Add(is.opts.JWKSRefetchInterval)
		return nil, err
	}
	is.meta, is.metaErr = d, nil
	return d, nil
}

func (is *issuer) fetchDiscovery(ctx context.Context) (*discovery, error) {
	u, err := url.Parse(is.cfg.URL)
	if err != nil {
		return nil, &unavailableError{issuer: is.cfg.URL, what: "the discovery document", err: err}
	}
	path := strings.TrimSuffix(u.Path, "/")
	oidcURL := *u
	oidcURL.Path = path + "/.well-known/openid-configuration"
	rfcURL := *u
	rfcURL.Path = "/.well-known/oauth-authorization-server" + path
	var tried []string
	for _, where := range []string{oidcURL.String(), rfcURL.String()} {
		var d discovery
		status, err := is.getJSON(ctx, where, &d)
		if err != nil {
			return nil, &unavailableError{issuer: is.cfg.URL, what: "the discovery document", err: err}
		}
		if status == http.StatusNotFound {
			tried = append(tried, where)
			continue
		}
		if d.Issuer != is.cfg.URL {
			return nil, &unavailableError{issuer: is.cfg.URL, what: "the discovery document",
				err: fmt.Errorf("%s names the issuer %q, not %q (the issuer configured must be the iss of its tokens, exactly)", where, d.Issuer, is.cfg.URL)}
		}
		return &d, nil
	}
	return nil, &unavailableError{issuer: is.cfg.URL, what: "the discovery document",
		err: fmt.Errorf("none at %s (set jwks_url, and introspection.url, in its auth.issuers entry)", strings.Join(tried, " nor "))}
}

// getJSON GETs a JSON document of at most maxDocumentBytes into v. A 404
// is returned as its status, for the caller to try elsewhere; any other
// status but 200 is an error.
func (is *issuer) getJSON(ctx context.Context, where string, v any) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, where, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := is.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return resp.StatusCode, nil
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s answered %s", where, resp.Status)
	}
	body, err := readBounded(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", where, err)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return 0, fmt.Errorf("%s is not a JSON document: %v", where, err)
	}
	return resp.StatusCode, nil
}

// readBounded reads a body of at most maxDocumentBytes.
func readBounded(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxDocumentBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxDocumentBytes {
		return nil, fmt.Errorf("the answer is larger than %d bytes", maxDocumentBytes)
	}
	return b, nil
}

// keySet returns the issuer's keys: at jwks_url, else at the discovery
// document's jwks_uri.
func (is *issuer) keySet(ctx context.Context) (*oidc.RemoteKeySet, error) {
	is.mu.Lock()
	ks := is.keys
	is.mu.Unlock()
	if ks != nil {
		return ks, nil
	}
	where := is.cfg.JWKSURL
	if where == "" {
		d, err := is.discover(ctx)
		if err != nil {
			return nil, err
		}
		if d.JWKSURI == "" {
			return nil, &unavailableError{issuer: is.cfg.URL, what: "the keys", err: errors.New("its discovery document has no jwks_uri (set jwks_url)")}
		}
		where = d.JWKSURI
	}
	is.mu.Lock()
	defer is.mu.Unlock()
	if is.keys == nil {
		kt := &keysTransport{issuer: is.cfg.URL, base: is.opts.Transport, interval: is.opts.JWKSRefetchInterval, now: is.opts.Now}
		client := &http.Client{Transport: kt, Timeout: is.opts.Timeout}
		// go-oidc keeps this context for its fetches, as configuration
		// (the client); they are bounded by the client's timeout.
		is.keys = oidc.NewRemoteKeySet(oidc.ClientContext(context.Background(), client), where)
	}
	return is.keys, nil
}

// introspectionURL returns the issuer's introspection endpoint: the one
// configured, else the discovery document's.
func (is *issuer) introspectionURL(ctx context.Context) (string, error) {
	if u := is.cfg.Introspection.URL; u != "" {
		return u, nil
	}
	d, err := is.discover(ctx)
	if err != nil {
		return "", err
	}
	if d.IntrospectionEndpoint == "" {
		return "", &unavailableError{issuer: is.cfg.URL, what: "the introspection endpoint",
			err: errors.New("its discovery document names none (set introspection.url)")}
	}
	return d.IntrospectionEndpoint, nil
}

// check reaches the issuer: what Tokens.Check says at start.
func (is *issuer) check(ctx context.Context) error {
	if is.cfg.JWKSURL == "" || is.cfg.Introspection != nil && is.cfg.Introspection.URL == "" {
		if _, err := is.discover(ctx); err != nil {
			return err
		}
	}
	ks, err := is.keySet(ctx)
	if err != nil {
		return err
	}
	// A token naming no key known makes the key set fetch the keys; its
	// signature failing is expected, its fetch failing is not.
	if _, err := ks.VerifySignature(ctx, probeJWT); err != nil {
		if ue, ok := errors.AsType[*unavailableError](err); ok {
			return ue
		}
	}
	if is.cfg.Introspection != nil {
		if _, err := is.introspectionURL(ctx); err != nil {
			return err
		}
	}
	return nil
}

// probeJWT is a JWT (header {"alg":"RS256","kid":"toolmux-probe"}, an
// empty payload, a signature of one byte) that no key verifies: Check's
// way to make a key set fetch its keys.
const probeJWT = "eyJhbGciOiJSUzI1NiIsImtpZCI6InRvb2xtdXgtcHJvYmUifQ.e30.AA"

// keysTransport fetches an issuer's key set for go-oidc's RemoteKeySet,
// which fetches it again whenever a token names a key it does not hold
// (how a rotation is picked up) and keeps no floor of its own: here a
// fetch within interval of the last one gives the last answer again (or
// its failure), so that tokens naming made-up keys cost one fetch per
// interval at most. An answer is bounded in size; a failure to fetch is an
// unavailableError, which go-oidc wraps (%w), so that a token whose keys
// could not be had is told from one whose signature is bad.
type keysTransport struct {
	issuer   string
	base     http.RoundTripper
	interval time.Duration
	now      func() time.Time

	mu      sync.Mutex
	at      time.Time // of the last fetch; zero before the first
	body    []byte    // the last key set fetched
	header  http.Header
	lastErr error
}

func (t *keysTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	if t.at.IsZero() || now.Sub(t.at) >= t.interval {
		t.at = now
		t.body, t.header, t.lastErr = t.fetch(req)
	}
	if t.lastErr != nil {
		return nil, t.lastErr
	}
	return &http.Response{StatusCode: http.StatusOK, Status: "200 OK", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: t.header.Clone(), Body: io.NopCloser(bytes.NewReader(t.body)), ContentLength: int64(len(t.body)), Request: req}, nil
}

func (t *keysTransport) fetch(req *http.Request) ([]byte, http.Header, error) {
	fail := func(err error) ([]byte, http.Header, error) {
		return nil, nil, &unavailableError{issuer: t.issuer, what: "the keys", err: err}
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return fail(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fail(fmt.Errorf("%s answered %s", req.URL, resp.Status))
	}
	body, err := readBounded(resp.Body)
	if err != nil {
		return fail(fmt.Errorf("%s: %w", req.URL, err))
	}
	return body, http.Header{"Content-Type": resp.Header.Values("Content-Type")}, nil
}
