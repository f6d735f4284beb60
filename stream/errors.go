package stream

import (
	"errors"
	"fmt"
	"strconv"
)

// ErrClosed is returned by Subscribe after the hub was closed.
var ErrClosed = errors.New("stream: hub closed")

// StoreError is a failure of the Store, with the operation that failed
// ("last_event_id", "events_after").
type StoreError struct {
	Op  string
	Err error
}

// Error implements error.
func (e *StoreError) Error() string { return "stream: store " + e.Op + ": " + e.Err.Error() }

// Unwrap returns the store's error.
func (e *StoreError) Unwrap() error { return e.Err }

// InvalidIDError is a Last-Event-ID (header or last_event_id parameter)
// that is not an event id: ids are decimal integers from 0.
type InvalidIDError struct {
	Value string
}

// Error implements error.
func (e *InvalidIDError) Error() string {
	return "stream: invalid Last-Event-ID " + strconv.Quote(e.Value) + ": want a decimal event id"
}

// OrderError is returned by MemoryStore.AppendEvents for events whose ids
// do not increase: the ring keeps events in id order so that replay can
// find a position by binary search.
type OrderError struct {
	Last, Got int64
}

// Error implements error.
func (e *OrderError) Error() string {
	return fmt.Sprintf("stream: event id %d does not follow %d", e.Got, e.Last)
}

// UnknownEventError is returned by Event.DecodeData for an event name this
// package does not define.
type UnknownEventError struct {
	Name string
}

// Error implements error.
func (e *UnknownEventError) Error() string { return "stream: unknown event " + strconv.Quote(e.Name) }
