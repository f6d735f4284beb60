// Package stream carries what happens in toolmux — workflows, agents, model
// turns, tool calls and their scheduler states, approvals — to whoever
// watches: a web page over Server-Sent Events, a Go program through a
// Subscription, and a durable Store for replay.
//
// The envelope of every event is MiroFlow's ({"event": NAME, "data": {...}})
// with an id, a time and a task added, so MiroFlow's front end reads the
// workflow, agent, llm, message, tool_call and show_error events unchanged,
// and a client that reconnects with Last-Event-ID gets exactly what it
// missed.
//
// Publishing is best effort by design and never slows a call down: a Hub
// hands each event to every subscriber through a bounded buffer and to the
// store through a bounded queue, and a subscriber that does not keep up
// loses events and is told so with a gap marker, never blocking the others
// or the publisher. The events of a scheduler's calls are encoded only when
// a subscriber, a replay or the store needs them, on their goroutines. The
// task log, not the stream, is the audit record.
//
// docs/events.md lists every event with its payload.
package stream
