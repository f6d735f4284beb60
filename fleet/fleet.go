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
	// Member, when set, is the member of the fleet this connection is,
	// with credentials of its own (ConnectOptions.Credentials sets it): a
	// worker or a submitter binds to the streams and buckets the fleet's
	// gateway set up (Setup) and changes nothing, and a submitter's runs
	// are its own. nil: the fleet's admin (a token, or a server without
	// authentication), which creates what is missing.
	Member *Membership
}

// Membership is who a member of the fleet is on its NATS server.
type Membership struct {
	Role Role
	// Key is the member's public nkey.
	Key string
}

// binds reports whether m binds to what the gateway set up rather than
// creating it: a worker's or a submitter's.
func (m *Membership) binds() bool { return m != nil && m.Role != RoleGateway && m.Role != "" }

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
	members jetstream.KeyValue

	// denied ends the operations waiting on what the server refused
	// this connection (nil for a connection of the caller's, Open).
	denied *denials
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
// stays the caller's; a worker or a submitter (o.Member) binds to them,
// and a fleet its gateway has not set up yet is a *NotSetUpError.
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
	stream, bucket := f.ensureStream, f.ensureBucket
	if o.Member.binds() {
		stream, bucket = f.bindStream, f.bindBucket
	}
	if f.queue, err = stream(ctx, f.queueConfig()); err != nil {
		return nil, fmt.Errorf("fleet: the queue: %w", err)
	}
	if f.events, err = stream(ctx, f.eventsConfig()); err != nil {
		return nil, fmt.Errorf("fleet: the events stream: %w", err)
	}
	for _, b := range []struct {
		kv  *jetstream.KeyValue
		cfg jetstream.KeyValueConfig
	}{{&f.runs, f.bucketConfig("RUNS")}, {&f.workers, f.bucketConfig("WORKERS")}, {&f.ledger, f.bucketConfig("LEDGER")},
		{&f.members, f.bucketConfig("MEMBERS")}} {
		if *b.kv, err = bucket(ctx, b.cfg); err != nil {
			return nil, fmt.Errorf("fleet: the %s bucket: %w", b.cfg.Bucket, err)
		}
	}
	if o.Member.binds() && o.Member.Role == RoleWorker {
		// A member's lease is the fleet's, the gateway's: its heartbeats,
		// renewals and shared offers go by it from the start.
		if _, err := f.queueConsumer(ctx); err != nil {
			return nil, err
		}
	}
	return f, nil
}

func (f *Fleet) storage() jetstream.StorageType {
	if f.opts.Memory {
		return jetstream.MemoryStorage
	}
	return jetstream.FileStorage
}

func (f *Fleet) queueConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        f.queueStream(),
		Description: "toolmux runs waiting for a worker",
		Subjects:    []string{f.opts.Prefix + ".queue.>"},
		Retention:   jetstream.WorkQueuePolicy,
		Duplicates:  10 * time.Minute,
		Replicas:    f.opts.Replicas,
		Storage:     f.storage(),
	}
}

func (f *Fleet) eventsConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        upper(f.opts.Prefix) + "_EVENTS",
		Description: "toolmux runs' events",
		Subjects:    []string{f.opts.Prefix + ".events.>"},
		MaxAge:      f.opts.Retention,
		Replicas:    f.opts.Replicas,
		Storage:     f.storage(),
		// A submitter reads the last event of its own runs by their
		// subject, which names them in the request's (Permissions).
		AllowDirect: true,
	}
}

// bucketConfig is the configuration of the fleet's bucket of what.
func (f *Fleet) bucketConfig(what string) jetstream.KeyValueConfig {
	cfg := jetstream.KeyValueConfig{Bucket: upper(f.opts.Prefix) + "_" + what, History: 1, Replicas: f.opts.Replicas, Storage: f.storage()}
	switch what {
	case "RUNS":
		cfg.Description, cfg.TTL = "toolmux runs' states", f.opts.Retention
	case "WORKERS":
		// A worker's entry outlives its last heartbeat by three beats.
		cfg.Description, cfg.TTL = workersDesc, 3*f.opts.heartbeat()
	case "LEDGER":
		cfg.Description, cfg.TTL = "toolmux call ledger", f.opts.Retention
	case "MEMBERS":
		cfg.Description = "toolmux fleet members: names, roles and groups by public nkey (the gateway's)"
	}
	return cfg
}

// NotSetUpError is a stream or bucket of the fleet that does not exist,
// for a member that may not create it: the fleet's gateway sets it up
// (waiting for it may mend it).
type NotSetUpError struct{ What string }

func (e *NotSetUpError) Error() string {
	return fmt.Sprintf("fleet: %s does not exist yet: the fleet's gateway (toolmux serve --nats or --nats-listen) sets it up", e.What)
}

// bindStream binds the stream cfg names, which must exist.
func (f *Fleet) bindStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	st, err := f.js.Stream(ctx, cfg.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, &NotSetUpError{What: "stream " + cfg.Name}
	}
	return st, err
}

// bindBucket binds the bucket cfg names, which must exist.
func (f *Fleet) bindBucket(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := f.js.KeyValue(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, &NotSetUpError{What: "bucket " + cfg.Bucket}
	}
	return kv, err
}

// Setup sets up what the members of the fleet bind to, as the fleet's
// gateway: the streams and buckets with this member's configuration (the
// events stream's direct reads, the workers' bucket's lifetime by the
// lease), the queue's consumer (its acknowledgement wait the lease) and
// the shared tools' stream and bucket. Members with credentials of their
// own may change none of it.
func (f *Fleet) Setup(ctx context.Context) error {
	if f.opts.Member.binds() {
		return &ConfigError{Field: "setup", Reason: "only the fleet's gateway sets the fleet up"}
	}
	if _, err := f.js.CreateOrUpdateStream(ctx, f.eventsConfig()); err != nil {
		return fmt.Errorf("fleet: setting the events stream up: %w", err)
	}
	if err := f.setLease(ctx); err != nil {
		return err
	}
	if _, err := f.queueConsumer(ctx); err != nil {
		return err
	}
	_, err := f.ensureShared(ctx)
	return err
}

// ensureStream binds the stream cfg names, creating it when it does not
// exist: a member of the fleet that only reads (runs, logs, submit) must
// not change what the workers set up.
func (f *Fleet) ensureStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	st, err := f.js.Stream(ctx, cfg.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		st, err = f.js.CreateStream(ctx, cfg)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			// Created by another member meanwhile.
			st, err = f.js.Stream(ctx, cfg.Name)
		}
	}
	return st, err
}

// ensureBucket is ensureStream for a KV bucket.
func (f *Fleet) ensureBucket(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := f.js.KeyValue(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = f.js.CreateKeyValue(ctx, cfg)
		if errors.Is(err, jetstream.ErrBucketExists) || errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			kv, err = f.js.KeyValue(ctx, cfg.Bucket)
		}
	}
	return kv, err
}

func (o Options) heartbeat() time.Duration { return max(o.Lease/4, 250*time.Millisecond) }

func (f *Fleet) queueStream() string  { return upper(f.opts.Prefix) + "_QUEUE" }
func (f *Fleet) queueSubject() string { return f.opts.Prefix + ".queue.run" }
func (f *Fleet) consumerName() string { return "workers" }

// eventSubjectOf is the subject of the events of the run ref:
// PREFIX.events.RUN, or PREFIX.events.u.OWNER.RUN for a member's, which
// only that member (and the workers) may read.
func (f *Fleet) eventSubjectOf(ref runRef) string {
	if ref.owner == "" {
		return f.opts.Prefix + ".events." + jsjournal.Token(ref.id)
	}
	return f.opts.Prefix + ".events." + memberSpace + ref.owner + "." + jsjournal.Token(ref.id)
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

// OpenJournal opens the task log's journal of the fleet (a member binds
// to it: the gateway opened it).
func (f *Fleet) OpenJournal(ctx context.Context) (j *jsjournal.Journal, err error) {
	ctx, end := f.denied.guard(ctx)
	defer func() { err = end(err) }()
	if f.opts.Member.binds() {
		j, err := jsjournal.Bind(ctx, f.js, f.opts.Journal)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, &NotSetUpError{What: "stream " + f.opts.Journal.Stream}
		}
		return j, err
	}
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
// it (the lease is theirs to set; the queue's consumer takes it too), and
// the gateway, which alone sets it in a fleet of members.
func (f *Fleet) setLease(ctx context.Context) error {
	kv, err := f.js.CreateOrUpdateKeyValue(ctx, f.bucketConfig("WORKERS"))
	if err != nil {
		return fmt.Errorf("fleet: setting the workers' bucket: %w", err)
	}
	f.workers = kv
	return nil
}
