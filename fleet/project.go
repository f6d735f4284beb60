package fleet

import (
	"context"
	"encoding/json"
	"slices"

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

// Summary counts a fleet's runs by status, for the page.
type Summary struct {
	Workers []WorkerInfo   `json:"workers"`
	Runs    map[Status]int `json:"runs"`
}

// Summarize returns the workers alive and the runs counted by status:
// the runs sees keeps (nil: all), and of the runs the workers hold, those
// (a caller's own, where callers see only theirs).
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
	}
	if sees != nil {
		for i, w := range s.Workers {
			s.Workers[i].Running = slices.DeleteFunc(slices.Clone(w.Running), func(task string) bool { return !seen[task] })
		}
	}
	return s, nil
}
