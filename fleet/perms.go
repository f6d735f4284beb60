package fleet

import (
	"github.com/nats-io/nats-server/v2/server"
)

// What each role may do on the fleet's NATS server (docs/fleet.md,
// "Members"). The server enforces it, whoever the client:
//
//   - a submitter publishes runs on PREFIX.queue.u.KEY, KEY its own public
//     nkey, and nowhere else on the queue, so the subject a run comes on
//     says who submitted it; it creates and reads its own runs' states
//     (keys u.KEY.… of the runs bucket) and reads its own runs' events
//     (PREFIX.events.u.KEY.…); it reads nothing else, the journal, the
//     ledger and the members included;
//   - a worker takes runs from the queue's one consumer, writes their
//     states, events, journal and ledger, reads the members, offers and
//     calls shared tools, asks the gateways its approval questions; it
//     publishes nothing on the queue, so it cannot submit a run, and
//     writes nothing of the members; it reads and writes the vault's
//     bucket (PREFIX_VAULT: sealed values, whose key is on the machines
//     only), to run each run with its submitter's credentials and keep
//     the OAuth tokens it refreshes;
//   - neither may create, change, purge or delete a stream, a bucket or
//     the queue's consumer (a stream's configuration could republish
//     what a member writes onto the queue, as anyone): the fleet's
//     gateway, with every permission, sets everything up (Fleet.Setup);
//   - replies come to each member's own inbox prefix (InboxPrefix), so
//     that no member can read another's: a member subscribes to its own
//     only.
//
// JetStream's API is requests on $JS.API.…, whose subjects name the
// stream and, for a consumer made with one filter or a message got by
// its subject, that subject: that is what scopes a submitter to its own
// runs.

// InboxPrefix is the prefix of the inboxes of the member of public key
// key in the fleet of prefix: the replies to it come there, and only it
// may subscribe to it.
func InboxPrefix(prefix, key string) string { return "_INBOX_" + prefix + "." + key }

// Permissions are what m may do on the NATS server of the fleet o names
// (defaults applied).
func Permissions(o Options, m Member) *server.Permissions {
	o.defaults()
	if m.Role == RoleGateway {
		return &server.Permissions{Publish: allow(">"), Subscribe: allow(">")}
	}
	n := namesOf(o)
	var pub []string
	// Every member binds to the fleet's streams and buckets: it reads
	// their configuration, never changes it.
	for _, s := range n.streams() {
		pub = append(pub, api("STREAM.INFO", s))
	}
	sub := []string{InboxPrefix(o.Prefix, m.NKey) + ".>"}
	switch m.Role {
	case RoleSubmitter:
		own := "u." + m.NKey
		runs, events := n.kv("RUNS"), n.stream("EVENTS")
		pub = append(pub,
			o.Prefix+".queue."+own,
			"$KV."+n.bucket("RUNS")+"."+own+".>",
			api("DIRECT.GET", runs, "$KV."+n.bucket("RUNS")+"."+own+".>"),
			api("CONSUMER.CREATE", runs, "*", "$KV."+n.bucket("RUNS")+"."+own+".>"),
			api("DIRECT.GET", events, o.Prefix+".events."+own+".>"),
			api("CONSUMER.CREATE", events, "*", o.Prefix+".events."+own+".>"),
		)
		// The ephemeral consumers it made: their names are random, and
		// it lists none.
		for _, s := range []string{runs, events} {
			pub = append(pub, api("CONSUMER.MSG.NEXT", s, "*"), api("CONSUMER.INFO", s, "*"), api("CONSUMER.DELETE", s, "*"),
				"$JS.FC."+s+".>")
		}
	case RoleWorker:
		queue := n.stream("QUEUE")
		pub = append(pub,
			api("CONSUMER.INFO", queue, "workers"), api("CONSUMER.MSG.NEXT", queue, "workers"), "$JS.ACK."+queue+".workers.>",
			o.Prefix+".events.>", o.Journal.Prefix+".>", o.Prefix+".shared.>",
			o.Prefix+".approvals.ask", o.Prefix+".approvals.withdraw", o.Prefix+".cancel.shared",
			// The replies of shared calls go to their callers, workers.
			"_INBOX_"+o.Prefix+".*.>",
		)
		// Its own heartbeat, no other worker's.
		pub = append(pub, "$KV."+n.bucket("WORKERS")+"."+m.Name)
		// The vault's bucket is bound by the workers only.
		pub = append(pub, api("STREAM.INFO", n.kv("VAULT")))
		for _, b := range []string{"RUNS", "LEDGER", "SHARED", "VAULT"} {
			pub = append(pub, "$KV."+n.bucket(b)+".>")
		}
		for _, b := range []string{"RUNS", "WORKERS", "LEDGER", "SHARED", "MEMBERS", "VAULT"} {
			pub = append(pub, api("DIRECT.GET", n.kv(b), ">"), api("STREAM.MSG.GET", n.kv(b)))
		}
		for _, s := range []string{n.stream("EVENTS"), o.Journal.Stream, n.stream("SHARED"), n.kv("SHARED"), n.kv("VAULT")} {
			pub = append(pub, api("CONSUMER.CREATE", s, ">"), api("CONSUMER.DURABLE.CREATE", s, ">"), api("CONSUMER.MSG.NEXT", s, "*"),
				api("CONSUMER.INFO", s, "*"), api("CONSUMER.DELETE", s, "*"), api("DIRECT.GET", s, ">"), api("STREAM.MSG.GET", s),
				"$JS.ACK."+s+".>", "$JS.FC."+s+".>")
		}
		sub = append(sub, o.Prefix+".cancel.shared")
	}
	return &server.Permissions{Publish: allow(pub...), Subscribe: allow(sub...)}
}

func allow(subjects ...string) *server.SubjectPermission {
	return &server.SubjectPermission{Allow: subjects}
}

func api(parts ...string) string {
	s := "$JS.API"
	for _, p := range parts {
		s += "." + p
	}
	return s
}

// names are the fleet's streams and buckets.
type names struct{ o Options }

func namesOf(o Options) names { return names{o} }

func (n names) stream(what string) string { return upper(n.o.Prefix) + "_" + what }
func (n names) bucket(what string) string { return upper(n.o.Prefix) + "_" + what }
func (n names) kv(what string) string     { return "KV_" + n.bucket(what) }

func (n names) streams() []string {
	return []string{n.stream("QUEUE"), n.stream("EVENTS"), n.stream("SHARED"), n.o.Journal.Stream,
		n.kv("RUNS"), n.kv("WORKERS"), n.kv("LEDGER"), n.kv("SHARED"), n.kv("MEMBERS")}
}
