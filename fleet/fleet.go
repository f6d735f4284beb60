package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolmux/toolmux/tasklog/jsjournal"
)

// Options name the fleet's streams and buckets and bound what they keep.
// The zero value is the defaults; every member of a fleet must use the
// same Prefix.
type Options struct {
	// Prefix is the subjects' first token and the streams' and buckets'
	// name prefix (default "toolmux"): fleets with different prefixes
	// share a NATS server without seeing each other.
	Prefix string
	// Lease is how long a worker holds a run without renewing it
	// (default 10s): a worker that dies loses its runs to another worker
	// this long after its last renewal. Renewals go every Lease/4.
	Lease time.Duration
	// MaxDeliveries is how many times a run is handed to a worker before
	// it is given up as failed (default 3): a run that kills its workers
	// is not retried forever.
	MaxDeliveries int
	// Retention is how long finished runs, their events and their call
	// ledger entries are kept (default 7 days); the journal keeps records
	// by its own Journal limits.
	Retention time.Duration
	// Replicas is the streams' replication in a cluster (default 1).
	Replicas int
	// Memory keeps everything in memory (tests: nothing survives the
	// server).
	Memory bool
	// Journal configures the task log's journal; its Stream and Prefix
	// default to PREFIX's.
	Journal jsjournal.Config
}

func (o *Options) defaults() {
	if o.Prefix == "" {
		o.Prefix = "toolmux"
	}
	if o.Lease <= 0 {
		o.Lease = 10 * time.Second
	}
	if o.MaxDeliveries <= 0 {
		o.MaxDeliveries = 3
	}
	if o.Retention <= 0 {
		o.Retention = 7 * 24 * time.Hour
	}
	if o.Replicas <= 0 {
		o.Replicas = 1
	}
	if o.Journal.Stream == "" {
		o.Journal.Stream = upper(o.Prefix) + "_JOURNAL"
	}
	if o.Journal.Prefix == "" {
		o.Journal.Prefix = o.Prefix + ".journal"
	}
	if o.Journal.Replicas == 0 {
		o.Journal.Replicas = o.Replicas
	}
	if o.Memory {
		o.Journal.Memory = true
	}
}

func upper(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z':
			b[i] = c - 'a' + 'A'
		case c == '.' || c == '-':
			b[i] = '_'
		}
	}
	return string(b)
}

// Fleet is a connection to a fleet's streams and buckets: what a worker, a
// submitter and the page share. It is safe for concurrent use.
type Fleet struct {
	nc      *nats.Conn
	ownConn bool
	js      jetstream.JetStream
	opts    Options

	queue   jetstream.Stream
	events  jetstream.Stream
	runs    jetstream.KeyValue
	workers jetstream.KeyValue
	ledger  jetstream.KeyValue
}

// ConfigError is a fleet option that cannot work.
type ConfigError struct {
	Field, Reason string
}

func (e *ConfigError) Error() string { return "fleet: " + e.Field + ": " + e.Reason }

// UnreachableError is a NATS server that could not be reached (or that
// refused the member's credentials: errors.Is nats.ErrAuthorization). Its
// message shows the URL without credentials.
type UnreachableError struct {
	URL string
	Err error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("fleet: cannot reach the NATS server at %s: %v", RedactURL(e.URL), e.Err)
}
func (e *UnreachableError) Unwrap() error { return e.Err }

// Open creates (or updates) the fleet's streams and buckets on nc, which
// stays the caller's.
func Open(ctx context.Context, nc *nats.Conn, o Options) (*Fleet, error) {
	o.defaults()
	if !jsjournal.ValidToken(o.Prefix) {
		return nil, &ConfigError{Field: "prefix", Reason: fmt.Sprintf("%q: want letters, digits, '-' and '_'", o.Prefix)}
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	f := &Fleet{nc: nc, js: js, opts: o}
	storage := jetstream.FileStorage
	kvStorage := jetstream.FileStorage
	if o.Memory {
		storage, kvStorage = jetstream.MemoryStorage, jetstream.MemoryStorage
	}
	if f.queue, err = ensureStream(ctx, js, jetstream.StreamConfig{
		Name:        f.queueStream(),
		Description: "toolmux runs waiting for a worker",
		Subjects:    []string{o.Prefix + ".queue.>"},
		Retention:   jetstream.WorkQueuePolicy,
		Duplicates:  10 * time.Minute,
		Replicas:    o.Replicas,
		Storage:     storage,
	}); err != nil {
		return nil, fmt.Errorf("fleet: creating the queue: %w", err)
	}
	if f.events, err = ensureStream(ctx, js, jetstream.StreamConfig{
		Name:        upper(o.Prefix) + "_EVENTS",
		Description: "toolmux runs' events",
		Subjects:    []string{o.Prefix + ".events.>"},
		MaxAge:      o.Retention,
		Replicas:    o.Replicas,
		Storage:     storage,
	}); err != nil {
		return nil, fmt.Errorf("fleet: creating the events stream: %w", err)
	}
	bucket := func(name, desc string, ttl time.Duration) (jetstream.KeyValue, error) {
		kv, err := ensureBucket(ctx, js, jetstream.KeyValueConfig{
			Bucket: upper(o.Prefix) + "_" + name, Description: desc, TTL: ttl, History: 1,
			Replicas: o.Replicas, Storage: kvStorage,
		})
		if err != nil {
			return nil, fmt.Errorf("fleet: creating the %s bucket: %w", name, err)
		}
		return kv, nil
	}
	if f.runs, err = bucket("RUNS", "toolmux runs' states", o.Retention); err != nil {
		return nil, err
	}
	// A worker's entry outlives its last heartbeat by three beats.
	if f.workers, err = bucket("WORKERS", workersDesc, 3*o.heartbeat()); err != nil {
		return nil, err
	}
	if f.ledger, err = bucket("LEDGER", "toolmux call ledger", o.Retention); err != nil {
		return nil, err
	}
	return f, nil
}

// ensureStream binds the stream cfg names, creating it when it does not
// exist: a member of the fleet that only reads (runs, logs, submit) must
// not change what the workers set up.
func ensureStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	st, err := js.Stream(ctx, cfg.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		st, err = js.CreateStream(ctx, cfg)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			// Created by another member meanwhile.
			st, err = js.Stream(ctx, cfg.Name)
		}
	}
	return st, err
}

// ensureBucket is ensureStream for a KV bucket.
func ensureBucket(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, cfg)
		if errors.Is(err, jetstream.ErrBucketExists) || errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			kv, err = js.KeyValue(ctx, cfg.Bucket)
		}
	}
	return kv, err
}

func (o Options) heartbeat() time.Duration { return max(o.Lease/4, 250*time.Millisecond) }

func (f *Fleet) queueStream() string  { return upper(f.opts.Prefix) + "_QUEUE" }
func (f *Fleet) queueSubject() string { return f.opts.Prefix + ".queue.run" }
func (f *Fleet) consumerName() string { return "workers" }
func (f *Fleet) eventSubject(id string) string {
	return f.opts.Prefix + ".events." + jsjournal.Token(id)
}

// VaultBucket is the name of the fleet's vault bucket (vault/jsvault):
// PREFIX_VAULT, beside the fleet's other buckets. It holds sealed values
// only; the key stays on the members' machines.
func (f *Fleet) VaultBucket() string { return upper(f.opts.Prefix) + "_VAULT" }

// Options are the fleet's options, defaults applied.
func (f *Fleet) Options() Options { return f.opts }

// JetStream is the fleet's JetStream context (for the task log's journal).
func (f *Fleet) JetStream() jetstream.JetStream { return f.js }

// Conn is the fleet's NATS connection.
func (f *Fleet) Conn() *nats.Conn { return f.nc }

// OpenJournal opens the task log's journal of the fleet.
func (f *Fleet) OpenJournal(ctx context.Context) (*jsjournal.Journal, error) {
	return jsjournal.Open(ctx, f.js, f.opts.Journal)
}

// Close closes the connection when Connect made it, after flushing what
// it has buffered (at most 2s: a server that is down gets nothing more).
func (f *Fleet) Close() error {
	if !f.ownConn {
		return nil
	}
	err := f.nc.FlushTimeout(2 * time.Second)
	f.nc.Close()
	if errors.Is(err, nats.ErrConnectionClosed) {
		err = nil
	}
	return err
}

// key is a run id as a KV key (KV keys allow '.', '=' and '/' too, but a
// run id from a JSONL file may hold anything).
func key(id string) string { return jsjournal.Token(id) }

var errStop = errors.New("stop")

const workersDesc = "toolmux workers alive"

// setLease makes the fleet's lease-bound settings this member's: the
// workers' entries expire three heartbeats after the last. Workers call
// it (the lease is theirs to set; the queue's consumer takes it too).
func (f *Fleet) setLease(ctx context.Context) error {
	storage := jetstream.FileStorage
	if f.opts.Memory {
		storage = jetstream.MemoryStorage
	}
	kv, err := f.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: upper(f.opts.Prefix) + "_WORKERS", Description: workersDesc, TTL: 3 * f.opts.heartbeat(), History: 1,
		Replicas: f.opts.Replicas, Storage: storage,
	})
	if err != nil {
		return fmt.Errorf("fleet: setting the workers' bucket: %w", err)
	}
	f.workers = kv
	return nil
}
