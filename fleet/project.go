package fleet

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Project follows every run's events on the fleet's events stream, from
// the stream position after `after` (0: from the start), and hands each to
// fn with its stream position, until ctx ends. The gateway's page uses it
// to show fleet runs as local ones: it republishes them into its event
// hub and saves the position, so that a restart goes on where it stopped.
func (f *Fleet) Project(ctx context.Context, after uint64, fn func(pos uint64, e Event)) error {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{f.opts.Prefix + ".events.>"}}
	if after > 0 {
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = after + 1
	}
	err := f.follow(ctx, cfg, func(m jetstream.Msg, meta *jetstream.MsgMetadata) bool {
		var e Event
		if json.Unmarshal(m.Data(), &e) == nil {
			fn(meta.Sequence.Stream, e)
		}
		return true
	})
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// RecentRuns is how many ended runs a Summary lists: the page's Fleet
// tab shows the latest ones, not the fleet's history (toolmux runs and
// the task log have every run).
const RecentRuns = 20

// Summary counts a fleet's runs by status, for the page, and lists the
// RecentRuns that ended last.
type Summary struct {
	Workers []WorkerInfo   `json:"workers"`
	Runs    map[Status]int `json:"runs"`
	Recent  []RecentRun    `json:"recent"`
}

// RecentRun is one ended run as the page lists it.
type RecentRun struct {
	// ID is the run's task (its id, or SUBMITTER:ID for a member's run):
	// the page links it to the task.
	ID     string `json:"id"`
	Status Status `json:"status"`
	Worker string `json:"worker,omitempty"`
	// Started and Ended are the worker's times; DurationMS the time
	// between (0 for a run given up before any worker started it).
	Started    time.Time `json:"started,omitzero"`
	Ended      time.Time `json:"ended"`
	DurationMS int64     `json:"duration_ms"`
	ErrorKind  string    `json:"error_kind,omitempty"`
	Error      string    `json:"error,omitempty"`
}

// Summarize returns the workers alive, the runs counted by status and
// the RecentRuns that ended last, newest first: the runs sees keeps (nil:
// all), and of the runs the workers hold, those (a caller's own, where
// callers see only theirs).
func (f *Fleet) Summarize(ctx context.Context, sees func(*Run) bool) (*Summary, error) {
	ws, err := f.Workers(ctx)
	if err != nil {
		return nil, err
	}
	runs, err := f.Runs(ctx)
	if err != nil {
		return nil, err
	}
	s := &Summary{Workers: ws, Runs: map[Status]int{StatusQueued: 0, StatusRunning: 0, StatusDone: 0, StatusFailed: 0}}
	if s.Workers == nil {
		s.Workers = []WorkerInfo{}
	}
	seen := map[string]bool{}
	var ended []*Run
	for _, r := range runs {
		if sees != nil && !sees(r) {
			continue
		}
		s.Runs[r.Status]++
		task := r.TaskID
		if task == "" && r.SubmitterKey == "" {
			task = r.ID // taken by a worker before task ids were kept
		}
		seen[task] = true
		if r.Status.Final() {
			ended = append(ended, r)
		}
	}
	s.Recent = recent(ended)
	if sees != nil {
		for i, w := range s.Workers {
			s.Workers[i].Running = slices.DeleteFunc(slices.Clone(w.Running), func(task string) bool { return !seen[task] })
		}
	}
	return s, nil
}

// recent lists the RecentRuns of ended that ended last, newest first.
func recent(ended []*Run) []RecentRun {
	slices.SortFunc(ended, func(a, b *Run) int {
		if c := b.Ended.Compare(a.Ended); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	list := make([]RecentRun, 0, min(len(ended), RecentRuns))
	for _, r := range ended[:min(len(ended), RecentRuns)] {
		id := r.TaskID
		if id == "" {
			id = r.ID
		}
		rr := RecentRun{ID: id, Status: r.Status, Worker: r.Worker, Started: r.Started, Ended: r.Ended, ErrorKind: r.ErrorKind, Error: r.Error}
		if !r.Started.IsZero() && r.Ended.After(r.Started) {
			rr.DurationMS = r.Ended.Sub(r.Started).Milliseconds()
		}
		list = append(list, rr)
	}
	return list
}
