package testservers

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// StreamsHold reads back every message of every stream of js (the
// buckets' and the journal's included: they are streams) and returns the
// first that holds one of secrets, in its subject, data or headers, as
// "STREAM SUBJECT" (""), and how many messages it read: for the tests
// that no credential is at rest in a fleet.
func StreamsHold(ctx context.Context, js jetstream.JetStream, secrets []string) (found string, msgs int, err error) {
	for name := range js.StreamNames(ctx).Name() {
		st, err := js.Stream(ctx, name)
		if err != nil {
			return "", msgs, err
		}
		info, err := st.Info(ctx)
		if err != nil {
			return "", msgs, err
		}
		for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
			m, err := st.GetMsg(ctx, seq)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue // deleted
			}
			if err != nil {
				return "", msgs, err
			}
			msgs++
			all := m.Subject + string(m.Data) + fmt.Sprint(m.Header)
			for _, s := range secrets {
				if strings.Contains(all, s) {
					return name + " " + m.Subject, msgs, nil
				}
			}
		}
	}
	return "", msgs, ctx.Err()
}
