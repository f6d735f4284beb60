package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolmux/toolmux/tasklog/jsjournal"
	"github.com/toolmux/toolmux/tool"
)

// Scarce tools (a browser pool, a GPU-bound model) can be offered to the
// whole fleet by the workers that have them (`toolmux worker --share
// SERVER`). Their calls travel through a work-queue stream, one consumer
// per shared server whose MaxAckPending is the fleet-wide cap: JetStream
// hands out at most that many calls at once, whichever holders take them,
// and the rest wait in the stream, in order. The answer comes back to the
// caller's inbox by core NATS.
//
// A shared server's state (a browser's page) lives in the holder's
// session, so the calls of one run stick to the holder that served its
// first call (a KV entry per server and run); a call addressed to another
// holder is handed back to the stream until that holder takes it, or taken
// by anyone once that holder is gone.

const (
	replyHeader    = "Toolmux-Reply"
	deadlineHeader = "Toolmux-Deadline"
)

// sharedEntry is a holder's offer of one server, in the tools bucket
// under SERVER.HOLDER (expiring with the holder's heartbeats).
type sharedEntry struct {
	Server string      `json:"server"`
	Holder string      `json:"holder"`
	Max    int         `json:"max"`
	Tools  []tool.Tool `json:"tools"`
}

// SharedCaller is what a holder calls shared tools on (its manager).
type SharedCaller interface {
	Call(ctx context.Context, call tool.Call) *tool.Record
	Tools(ctx context.Context) (*tool.Catalog, error)
}

// ShareOptions say what a worker offers.
type ShareOptions struct {
	// Server is the configured server offered.
	Server string
	// Max is how many of its calls run at once in the whole fleet
	// (default 1); every holder of a server must give the same.
	Max int
	// Holder names the worker that offers it.
	Holder string
	// Caller runs the calls (a manager holding the server).
	Caller SharedCaller
	// Logger receives diagnostics (default: discarded).
	Logger *slog.Logger
}

func (f *Fleet) sharedStream() string { return upper(f.opts.Prefix) + "_SHARED" }
func (f *Fleet) sharedSubject(s, h string) string {
	if h == "" {
		return f.opts.Prefix + ".shared." + jsjournal.Token(s) + ".any"
	}
	return f.opts.Prefix + ".shared." + jsjournal.Token(s) + ".h." + h
}
func (f *Fleet) sharedCancel() string { return f.opts.Prefix + ".cancel.shared" }
func stickyKey(server, run string) string {
	return "run." + jsjournal.Token(server) + "." + jsjournal.Token(run)
}
func offerKey(server, holder string) string { return "offer." + jsjournal.Token(server) + "." + holder }
func offerPrefix(server string) string      { return "offer." + jsjournal.Token(server) + "." }

// ensureShared creates the shared calls' stream and the tools bucket (a
// member binds to them: the gateway set them up).
func (f *Fleet) ensureShared(ctx context.Context) (jetstream.KeyValue, error) {
	scfg := jetstream.StreamConfig{
		Name: f.sharedStream(), Description: "toolmux calls of shared tools",
		Subjects: []string{f.opts.Prefix + ".shared.>"}, Retention: jetstream.WorkQueuePolicy,
		Replicas: f.opts.Replicas, Storage: f.storage(),
	}
	kcfg := jetstream.KeyValueConfig{
		Bucket: upper(f.opts.Prefix) + "_SHARED", Description: "toolmux shared tools: offers and runs' holders",
		TTL: 3 * f.opts.heartbeat(), History: 1, Replicas: f.opts.Replicas, Storage: f.storage(),
	}
	if f.opts.Member.binds() {
		if _, err := f.bindStream(ctx, scfg); err != nil {
			return nil, err
		}
		return f.bindBucket(ctx, kcfg)
	}
	if _, err := f.js.CreateOrUpdateStream(ctx, scfg); err != nil {
		return nil, fmt.Errorf("fleet: creating the shared calls' stream: %w", err)
	}
	kv, err := f.js.CreateOrUpdateKeyValue(ctx, kcfg)
	if err != nil {
		return nil, fmt.Errorf("fleet: creating the shared tools' bucket: %w", err)
	}
	return kv, nil
}

// Share offers a server of this worker to the fleet until stop is called.
func (f *Fleet) Share(ctx context.Context, o ShareOptions) (stop func(), err error) {
	if o.Max <= 0 {
		o.Max = 1
	}
	if o.Caller == nil || o.Server == "" || o.Holder == "" {
		return nil, &ConfigError{Field: "share", Reason: "a shared server needs its name, its holder and a caller"}
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	kv, err := f.ensureShared(ctx)
	if err != nil {
		return nil, err
	}
	cat, err := o.Caller.Tools(ctx)
	if err != nil {
		return nil, fmt.Errorf("fleet: listing %s to share it: %w", o.Server, err)
	}
	var tools []tool.Tool
	for _, t := range cat.Tools() {
		if t.Server == o.Server {
			tools = append(tools, t)
		}
	}
	if len(tools) == 0 {
		return nil, &ConfigError{Field: "share", Reason: fmt.Sprintf("server %s has no tools to share (is it configured and up?)", o.Server)}
	}
	entry, _ := json.Marshal(sharedEntry{Server: o.Server, Holder: o.Holder, Max: o.Max, Tools: tools})
	cons, err := f.js.CreateOrUpdateConsumer(ctx, f.sharedStream(), jetstream.ConsumerConfig{
		Durable: "shared-" + jsjournal.Token(o.Server), Description: "holders of " + o.Server,
		FilterSubject: f.opts.Prefix + ".shared." + jsjournal.Token(o.Server) + ".>",
		AckPolicy:     jetstream.AckExplicitPolicy, AckWait: f.opts.Lease, MaxDeliver: -1,
		MaxAckPending: o.Max,
	})
	if err != nil {
		return nil, fmt.Errorf("fleet: sharing %s: %w", o.Server, err)
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	h := &holder{f: f, o: o, kv: kv, log: log, calls: map[string]context.CancelFunc{}}
	csub, err := f.nc.Subscribe(f.sharedCancel(), func(m *nats.Msg) { h.cancel(string(m.Data)) })
	if err != nil {
		cancel()
		return nil, err
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		// The offer lives as long as this holder beats.
		t := time.NewTicker(f.opts.heartbeat())
		defer t.Stop()
		for {
			if _, err := kv.Put(sctx, offerKey(o.Server, o.Holder), entry); err != nil && sctx.Err() == nil {
				log.Warn("could not offer a shared server", "server", o.Server, "error", err)
			}
			select {
			case <-sctx.Done():
				return
			case <-t.C:
			}
		}
	})
	for range o.Max {
		wg.Go(func() {
			for sctx.Err() == nil {
				fctx, fcancel := context.WithTimeout(sctx, time.Second)
				batch, err := cons.Fetch(1, jetstream.FetchContext(fctx))
				if err != nil {
					fcancel()
					if sctx.Err() == nil {
						sleep(sctx, 250*time.Millisecond)
					}
					continue
				}
				for m := range batch.Messages() {
					h.serve(sctx, m)
				}
				fcancel()
			}
		})
	}
	return func() {
		cancel()
		wg.Wait()
		csub.Unsubscribe() //nolint:errcheck // the connection closes next
		dctx, dcancel := context.WithTimeout(context.Background(), 2*time.Second)
		kv.Delete(dctx, offerKey(o.Server, o.Holder)) //nolint:errcheck // expires anyway
		dcancel()
	}, nil
}

type holder struct {
	f   *Fleet
	o   ShareOptions
	kv  jetstream.KeyValue
	log *slog.Logger

	mu    sync.Mutex
	calls map[string]context.CancelFunc
}

func (h *holder) cancel(id string) {
	h.mu.Lock()
	c := h.calls[id]
	h.mu.Unlock()
	if c != nil {
		c()
	}
}

// serve runs one shared call, if it is this holder's to run.
func (h *holder) serve(ctx context.Context, m jetstream.Msg) {
	var call tool.Call
	if err := json.Unmarshal(m.Data(), &call); err != nil {
		m.Term() //nolint:errcheck // malformed: nobody can run it
		return
	}
	inbox := m.Headers().Get(replyHeader)
	deadline, _ := strconv.ParseInt(m.Headers().Get(deadlineHeader), 10, 64)
	if deadline > 0 && time.Now().UnixNano() > deadline {
		// Its caller has given up: it must not run after.
		m.Term() //nolint:errcheck // dropped
		return
	}
	// Addressed to another holder, alive: hand it back for that one.
	if i := strings.LastIndex(m.Subject(), ".h."); i >= 0 {
		to := m.Subject()[i+3:]
		if to != h.o.Holder {
			if _, err := h.kv.Get(ctx, offerKey(h.o.Server, to)); err == nil {
				m.NakWithDelay(20 * time.Millisecond) //nolint:errcheck // redelivered after AckWait otherwise
				return
			}
		}
	}
	if call.Task != "" {
		b := []byte(h.o.Holder)
		if _, err := h.kv.Put(ctx, stickyKey(h.o.Server, call.Task), b); err != nil {
			h.log.Warn("could not record a run's holder", "server", h.o.Server, "run", call.Task, "error", err)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	if deadline > 0 {
		var c2 context.CancelFunc
		cctx, c2 = context.WithDeadline(cctx, time.Unix(0, deadline))
		defer c2()
	}
	defer cancel()
	h.mu.Lock()
	h.calls[call.ID] = cancel
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.calls, call.ID)
		h.mu.Unlock()
	}()
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(h.f.opts.heartbeat())
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				m.InProgress() //nolint:errcheck // the lease lapses otherwise, and another holder runs it
			}
		}
	}()
	call.Definition = nil
	rec := h.o.Caller.Call(cctx, call)
	close(done)
	b, err := json.Marshal(rec)
	if err != nil {
		b, _ = json.Marshal(tool.Refused(&call, &tool.Error{Kind: tool.KindExecutionFailed, Server: call.Server, Tool: call.Tool,
			Message: "the shared call's record could not be encoded: " + err.Error()}))
	}
	if inbox != "" {
		if err := h.f.nc.Publish(inbox, b); err != nil {
			h.log.Warn("could not answer a shared call", "call", call.ID, "error", err)
		}
	}
	m.Ack() //nolint:errcheck // the call ran; a redelivery would find its caller gone
}

// SharedServers lists the servers offered to the fleet now.
func (f *Fleet) SharedServers(ctx context.Context) ([]string, error) {
	kv, err := f.ensureShared(ctx)
	if err != nil {
		return nil, err
	}
	lister, err := kv.ListKeysFiltered(ctx, "offer.>")
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	for k := range lister.Keys() {
		e, err := kv.Get(ctx, k)
		if err != nil {
			continue
		}
		var se sharedEntry
		if json.Unmarshal(e.Value(), &se) == nil && !seen[se.Server] {
			seen[se.Server] = true
			out = append(out, se.Server)
		}
	}
	return out, nil
}

// RemoteSource is a shared server as a tool source of the manager: its
// tools are the holders' offer, its calls go through the fleet.
func (f *Fleet) RemoteSource(ctx context.Context, server string) (*Remote, error) {
	kv, err := f.ensureShared(ctx)
	if err != nil {
		return nil, err
	}
	return &Remote{f: f, kv: kv, server: server}, nil
}

// Remote is a shared server seen from a worker that does not hold it.
type Remote struct {
	f      *Fleet
	kv     jetstream.KeyValue
	server string
}

// Name is the shared server's name.
func (r *Remote) Name() string { return r.server }

// Tools are the tools a holder offers; none up is server_unavailable.
func (r *Remote) Tools(ctx context.Context) ([]tool.Tool, error) {
	lister, err := r.kv.ListKeysFiltered(ctx, offerPrefix(r.server)+"*")
	if err != nil {
		return nil, err
	}
	for k := range lister.Keys() {
		e, err := r.kv.Get(ctx, k)
		if err != nil {
			continue
		}
		var se sharedEntry
		if json.Unmarshal(e.Value(), &se) == nil {
			return se.Tools, nil
		}
	}
	return nil, &tool.Error{Kind: tool.KindServerUnavailable, Server: r.server,
		Message: "no worker of the fleet shares " + r.server + " now (toolmux worker --share " + r.server + ")", Err: tool.ErrNotSent}
}

// Call sends a call to the holders and waits for its record.
func (r *Remote) Call(ctx context.Context, name string, args map[string]any) (*tool.Result, error) {
	call, _ := tool.CallFrom(ctx)
	call.Server, call.Tool, call.Arguments, call.Definition = r.server, name, args, nil
	if call.ID == "" {
		call.ID = tool.NewID()
	}
	holder := ""
	if call.Task != "" {
		if e, err := r.kv.Get(ctx, stickyKey(r.server, call.Task)); err == nil {
			holder = string(e.Value())
		}
	}
	inbox := r.f.nc.NewInbox()
	sub, err := r.f.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, &tool.Error{Kind: tool.KindServerUnavailable, Server: r.server, Tool: name, Message: "the fleet cannot be reached: " + err.Error(), Err: errors.Join(err, tool.ErrNotSent)}
	}
	defer sub.Unsubscribe() //nolint:errcheck // a reply after this is dropped
	b, _ := json.Marshal(call)
	msg := nats.NewMsg(r.f.sharedSubject(r.server, holder))
	msg.Data = b
	msg.Header.Set(replyHeader, inbox)
	msg.Header.Set(jetstream.MsgIDHeader, call.ID)
	if d, ok := ctx.Deadline(); ok {
		msg.Header.Set(deadlineHeader, strconv.FormatInt(d.UnixNano(), 10))
	}
	if _, err := r.f.js.PublishMsg(ctx, msg); err != nil {
		return nil, &tool.Error{Kind: tool.KindServerUnavailable, Server: r.server, Tool: name, Message: "the fleet did not take the call: " + err.Error(), Err: errors.Join(err, tool.ErrNotSent)}
	}
	reply, err := sub.NextMsgWithContext(ctx)
	if err != nil {
		r.f.nc.Publish(r.f.sharedCancel(), []byte(call.ID)) //nolint:errcheck // the holder's deadline ends it too
		return nil, ctx.Err()
	}
	var rec tool.Record
	if err := json.Unmarshal(reply.Data, &rec); err != nil {
		return nil, &tool.Error{Kind: tool.KindExecutionFailed, Server: r.server, Tool: name, Message: "the holder's answer is not a record: " + err.Error()}
	}
	if rec.Error != nil && rec.Result == nil {
		return nil, rec.Error
	}
	return rec.Result, nil
}

// Close has nothing to release: the fleet's connection is the fleet's.
func (r *Remote) Close() error { return nil }
