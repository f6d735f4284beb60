package tasklog

import (
	"context"

	"github.com/toolmux/toolmux/stream"
)

// StreamStore returns the log as the event store of a stream.Hub: the
// hub persists every event it publishes here, continues its ids after the
// last one stored, and replays from here to clients that resume with
// Last-Event-ID after the hub's own memory no longer holds what they
// missed.
func (l *Log) StreamStore() stream.Store { return streamStore{l} }

// streamStore converts between the two event types, which have the same
// fields: tasklog does not make stream's type its own, so that the log's
// schema does not change with the stream package.
type streamStore struct{ l *Log }

func (s streamStore) AppendEvents(ctx context.Context, evs ...stream.Event) error {
	out := make([]Event, len(evs))
	for i, e := range evs {
		out[i] = Event(e)
	}
	return s.l.AppendEvents(ctx, out...)
}

func (s streamStore) EventsAfter(ctx context.Context, afterID int64, task string, limit int) ([]stream.Event, error) {
	evs, err := s.l.EventsAfter(ctx, afterID, task, limit)
	if err != nil {
		return nil, err
	}
	out := make([]stream.Event, len(evs))
	for i, e := range evs {
		out[i] = stream.Event(e)
	}
	return out, nil
}

func (s streamStore) LastEventID(ctx context.Context) (int64, error) { return s.l.LastEventID(ctx) }
