package gateway

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/toolmux/toolmux/config"
	"github.com/toolmux/toolmux/internal/jsonscan"
)

// Listen streams (docs/gateway.md, "Listen streams"). A client of
// 2026-07-28 learns of list changes by a subscriptions/listen request,
// which the server answers with a stream that never ends by itself: its
// POST, its connection and its goroutines live until the client goes
// away. Each costs the gateway a file descriptor and some 130 KB, and
// the client chooses how many it opens, so they are bounded: for the
// whole gateway, and for each client. They are counted at the HTTP layer
// (jsonRPCErrors, modernErrors), where the stream is the life of the
// POST, on every HTTP route and in both eras (a session of an older
// protocol may send the method too: the go-sdk serves it).

// Defaults of Listens.
//
// A client needs one stream per server it watches: the go-sdk's client
// opens one at connect, and one more per resource it subscribes to. 16
// leaves room for a few subscribed resources and for reconnections whose
// old stream the gateway has not yet seen close, while a client opening
// streams in a loop stops at 16. The gateway's 1000 holds at most some
// 130 MB and 1000 file descriptors (Go raises the soft limit of open
// files to the hard one at start, commonly 524288 or more): room for a
// few hundred ordinary clients, or some 60 at their own bound, on a
// machine of modest size, while a flood of streams stops there.
const (
	DefaultMaxListens          = 1000
	DefaultMaxListensPerClient = 16
)

// CodeListenLimit is the JSON-RPC error code of a subscriptions/listen
// refused because the gateway, or the client, has its bound of streams
// open. It is in the range JSON-RPC leaves to implementations, next to
// CodeSessionLimit.
const CodeListenLimit = -32031

// Listens bounds the subscriptions/listen streams. Zero values mean the
// defaults.
type Listens struct {
	// Max bounds the streams open at once on the gateway, every route
	// together.
	Max int
	// MaxPerClient bounds those of one client: one route, one credential
	// (the Authorization header) and one clientInfo (a 2026-07-28
	// request's _meta, or the session's initialize).
	MaxPerClient int
}

// ListensFromConfig returns the gateway's Listens of a subscriptions
// section.
func ListensFromConfig(c config.Subscriptions) Listens {
	return Listens{Max: c.MaxListens, MaxPerClient: c.MaxListensPerClient}
}

// ListenStats counts the gateway's listen streams.
type ListenStats struct {
	// Open is how many are open now.
	Open int
	// Max and MaxPerClient are the bounds, defaults applied.
	Max, MaxPerClient int
	// Refused counts those refused for Max since the gateway started,
	// RefusedPerClient those refused for MaxPerClient.
	Refused, RefusedPerClient uint64
}

// ListenStats returns the counts of listen streams.
func (g *Gateway) ListenStats() ListenStats {
	l := g.listens
	l.mu.Lock()
	defer l.mu.Unlock()
	return ListenStats{Open: l.open, Max: l.max, MaxPerClient: l.perClient,
		Refused: l.refused.Load(), RefusedPerClient: l.refusedClient.Load()}
}

// listens holds the gateway's listen streams.
type listens struct {
	max, perClient int

	refused, refusedClient atomic.Uint64

	mu       sync.Mutex
	open     int
	byClient map[listenKey]int // streams open, by client
}

// listenKey identifies a client: the SHA-256 of its route, credential
// and clientInfo, so that no credential is held.
type listenKey [sha256.Size]byte

func newListens(o Listens) *listens {
	if o.Max <= 0 {
		o.Max = DefaultMaxListens
	}
	if o.MaxPerClient <= 0 {
		o.MaxPerClient = DefaultMaxListensPerClient
	}
	return &listens{max: o.Max, perClient: o.MaxPerClient, byClient: map[listenKey]int{}}
}

var listenText = []byte("subscriptions/listen")

// isListen reports whether a scanned method is subscriptions/listen.
func isListen(raw []byte) bool { return isMethod(raw, "subscriptions/listen") }

// admitListen takes a place for a POST of route (body, scanned as msg) that
// opens a listen stream, until the returned function is called; ok is
// false when it has answered the request: over a bound (503, Retry-After
// and a JSON-RPC error naming the key), or a batch holding a listen
// (which the bounds could not follow). Any other request passes for the
// cost of a comparison.
func (g *Gateway) admitListen(w http.ResponseWriter, r *http.Request, route string, body []byte, msg jsonscan.Message) (release func(), ok bool) {
	if msg.Array {
		if batchListens(body) {
			writeRPCError(w, http.StatusBadRequest, nil, codeInvalidRequest,
				"toolmux: subscriptions/listen cannot be sent in a batch: send it as a request of its own")
			return nil, false
		}
		return func() {}, true
	}
	if !isListen(msg.Method) {
		return func() {}, true
	}
	l := g.listens
	key := g.listenClient(r, route, body)
	l.mu.Lock()
	var refusal *jsonrpc.Error
	switch {
	case l.open >= l.max:
		l.refused.Add(1)
		refusal = listenLimitError("subscriptions.max_listens", l.max, "on this gateway")
	case l.byClient[key] >= l.perClient:
		l.refusedClient.Add(1)
		refusal = listenLimitError("subscriptions.max_listens_per_client", l.perClient, "for this client (route, credential and clientInfo)")
	default:
		l.open++
		l.byClient[key]++
	}
	l.mu.Unlock()
	if refusal != nil {
		refuse(w, body, refusal)
		return nil, false
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.open--
			if l.byClient[key]--; l.byClient[key] <= 0 {
				delete(l.byClient, key)
			}
		})
	}, true
}

// batchListens reports whether a batch holds a subscriptions/listen
// request; decoded only when its text may name the method.
func batchListens(body []byte) bool {
	if !bytes.Contains(body, listenText) && bytes.IndexByte(body, '\\') < 0 {
		return false
	}
	var batch []struct {
		Method string `json:"method"`
	}
	if json.Unmarshal(body, &batch) != nil {
		return false // the go-sdk refuses what is not a batch of messages
	}
	for _, m := range batch {
		if m.Method == "subscriptions/listen" {
			return true
		}
	}
	return false
}

// listenLimitError is the answer to a listen over a bound: which one,
// and the key that raises it.
func listenLimitError(key string, max int, scope string) *jsonrpc.Error {
	data, _ := json.Marshal(map[string]any{"limit": key, "max": max})
	return &jsonrpc.Error{
		Code: CodeListenLimit,
		Message: fmt.Sprintf("toolmux: %d subscriptions/listen streams are open %s, the most allowed (%s in the configuration); "+
			"close one, or retry later", max, scope, key),
		Data: data,
	}
}

// listenClient returns the key of the client of a listen request: its
// route, its caller (requesterOf), and its clientInfo (the _meta of a 2026-07-28
// request, else the initialize of its session; none: "").
func (g *Gateway) listenClient(r *http.Request, route string, body []byte) listenKey {
	var m struct {
		Params struct {
			Meta struct {
				ClientInfo *struct {
					Name    string `json:"name"`
					Version string `json:"version"`
				} `json:"io.modelcontextprotocol/clientInfo"`
			} `json:"_meta"`
		} `json:"params"`
	}
	_ = json.Unmarshal(body, &m) // a malformed one is the go-sdk's to refuse
	var name, version string
	if ci := m.Params.Meta.ClientInfo; ci != nil {
		name, version = ci.Name, ci.Version
	} else if rec := g.clients.lookup(r.Header.Get(sessionHeader), route); rec != nil {
		name, version = rec.ClientName, rec.ClientVersion
	}
	auth := requesterOf(r)
	h := sha256.New()
	for _, f := range [][]byte{[]byte(route), auth[:], []byte(name), []byte(version)} {
		writeField(h, f)
	}
	var k listenKey
	h.Sum(k[:0])
	return k
}
