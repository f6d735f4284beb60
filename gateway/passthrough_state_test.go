package gateway

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A requestState comes back from the client, untrusted: one the gateway
// sealed opens to what it sealed; any other with the gateway's prefix is
// refused, without the payload being read unless its signature holds;
// one without the prefix is the server's, as it is, when the server
// speaks 2026-07-28, and refused when it speaks 2025-11-25 (it has none).
func FuzzOpenState(f *testing.F) {
	r := &route{parks: newParking(0, time.Minute)}
	copy(r.stateKey[:], "0123456789abcdef0123456789abcdef")
	sealed := r.sealState(gatewayState{
		Approvals: mcp.InputResponseMap{"toolmux-approval-1": &mcp.ElicitResult{Action: "accept", Content: map[string]any{"decision": "once"}}},
		Upstream:  "up-state",
	})
	f.Add(sealed, false)
	f.Add(r.sealState(gatewayState{Parked: "abc"}), true)
	f.Add("plain upstream state", true)
	f.Add("plain upstream state", false)
	f.Add("", false)
	f.Add(statePrefix, true)
	f.Add(statePrefix+"e30.", false)
	f.Add(sealed[:len(sealed)-3]+"AAA", true)
	f.Fuzz(func(t *testing.T, state string, upModern bool) {
		s, err := r.openState(state, upModern)
		switch {
		case state != "" && !upModern && !strings.HasPrefix(state, statePrefix):
			if err != errForeignState {
				t.Fatalf("a state %q the gateway did not issue, to a server without states: %+v, %v", state, s, err)
			}
		case !strings.HasPrefix(state, statePrefix):
			if err != nil || s.Upstream != state || s.Parked != "" || s.Approvals != nil {
				t.Fatalf("a server's state %q: %+v, %v", state, s, err)
			}
		case err == nil:
			// Only what the gateway sealed opens: sealing it again gives
			// a state that opens to the same.
			again, err := r.openState(r.sealState(s), upModern)
			s.Issued, again.Issued = 0, 0
			if err != nil || !reflect.DeepEqual(s, again) {
				t.Fatalf("%q opened to %+v, sealed again to %+v (%v)", state, s, again, err)
			}
		}
	})
}

func TestSealedStateRoundTrip(t *testing.T) {
	r := &route{parks: newParking(0, time.Minute)}
	copy(r.stateKey[:], "0123456789abcdef0123456789abcdef")
	in := gatewayState{Upstream: "u", Parked: "p"}
	out, err := r.openState(r.sealState(in), false)
	if err != nil || out.Upstream != "u" || out.Parked != "p" || out.Issued == 0 {
		t.Fatalf("%+v, %v", out, err)
	}
	other := &route{parks: newParking(0, time.Minute)}
	if _, err := other.openState(r.sealState(in), true); err != errTamperedState {
		t.Errorf("a state sealed by another route's key: %v", err)
	}
}
