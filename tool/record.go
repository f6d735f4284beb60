package tool

import (
	"crypto/rand"
	"encoding/base32"
	"encoding/binary"
	"encoding/json"
	"math"
	"time"
)

// Call is a request to run one tool.
type Call struct {
	// ID identifies the call across processes; [NewID] fills it when empty.
	ID string `json:"id,omitempty"`
	// Server and Tool are the tool's identity (not its exposed name).
	Server string `json:"server"`
	Tool   string `json:"tool"`
	// Arguments is the JSON object of arguments.
	Arguments map[string]any `json:"arguments"`
	// Task identifies the task (an agent run, a gateway client session) the
	// call belongs to; per-task state such as "first use of a tool" keys on it.
	Task string `json:"task,omitempty"`
	// Session names the agent within the task that made the call ("main", a
	// sub-agent's session); duplicate detection counts per session.
	Session string `json:"session,omitempty"`
	// Caller is who made the call (docs/identity.md): nil when no
	// authentication is configured. The scheduler sets it from the
	// caller its context carries (identity.From) when it is not set.
	Caller *CallerRef `json:"caller,omitempty"`
	// Parent is the id of the call this one was made within: a program's
	// run_code call (docs/codemode.md); "" for a call of its own.
	Parent string `json:"parent,omitempty"`
	// Definition, when set, is the definition of the tool the call was
	// admitted against (the scheduler sets it): the layers below use it
	// (see [Call.Def]) instead of looking the tool up again, so that the
	// definition the policy judged is the one the arguments are repaired
	// and validated against and the one the manager calls. It is never
	// sent anywhere.
	Definition *Tool `json:"-"`
}

// Def returns the call's Definition when it is the definition of the tool
// called, nil otherwise: a layer that sends the call to another tool (a
// fallback) need not clear it.
func (c *Call) Def() *Tool {
	if d := c.Definition; d != nil && d.Name == c.Tool && d.Server == c.Server {
		return d
	}
	return nil
}

// CallerRef is what a call and its record keep of who made it
// (identity.Ref): the name people read and the key ownership compares
// (identity.Caller.Key), never a credential.
type CallerRef struct {
	Name string `json:"name"`
	Key  string `json:"key"`
}

// String is the caller's name; "" for nil.
func (r *CallerRef) String() string {
	if r == nil {
		return ""
	}
	return r.Name
}

// The kinds of credential a record names (Record.Credential).
const (
	// CredentialUserSecret: the caller's own secrets (toolmux secrets set).
	CredentialUserSecret = "user-secret"
	// CredentialUserOAuth: the caller's own OAuth token, which the user
	// authorized toolmux to get from the server's authorization server.
	CredentialUserOAuth = "user-oauth"
	// CredentialTokenExchange: a token of the server's own, exchanged at
	// the caller's identity provider for the caller's (RFC 8693).
	CredentialTokenExchange = "token-exchange"
)

// NewRecord returns the record of call as it starts: the call's identity
// and arguments, the tool's exposed name (name; "" means
// [ExposedName]), and Started now. Every layer that answers a call builds
// its record here, so that a record carries the same fields whoever made
// it.
func NewRecord(call *Call, name string) *Record {
	if name == "" {
		name = ExposedName(call.Server, call.Tool)
	}
	return &Record{ID: call.ID, Task: call.Task, Session: call.Session, Caller: call.Caller, Server: call.Server, Tool: call.Tool,
		Name: name, Parent: call.Parent, Arguments: call.Arguments, Started: time.Now()}
}

// Refused returns the record of a call that ended without running, with
// err: Started and Ended are now.
func Refused(call *Call, err *Error) *Record {
	rec := NewRecord(call, "")
	rec.Ended, rec.Error = rec.Started, err
	return rec
}

// Record is the uniform account of one call: what was asked, what came back,
// how long it took and how many attempts it needed. A failed call is a Record
// with Error set, never a panic.
type Record struct {
	ID      string `json:"id"`
	Task    string `json:"task,omitempty"`
	Session string `json:"session,omitempty"`
	// Caller is who made the call: its name and key, never its
	// credential; absent when no authentication is configured.
	Caller *CallerRef `json:"caller,omitempty"`
	Server string     `json:"server"`
	Tool   string     `json:"tool"`
	// Credential is the kind of credential the call reached its server
	// with, for a server that takes each caller's own (CredentialUserSecret);
	// "" for one connection shared by every caller, with the credential the
	// configuration gives. Never the credential itself.
	Credential string `json:"credential,omitempty"`
	// Name is the tool's exposed name, when the call went through a catalog.
	Name string `json:"name,omitempty"`
	// Parent is the id of the call this one was made within (Call.Parent):
	// the record of a program's run_code call; absent for a call of its
	// own, so that records without one read and write as before.
	Parent string `json:"parent,omitempty"`
	// Arguments are the arguments as sent to the tool.
	Arguments map[string]any `json:"arguments"`
	// Result is what the tool returned; it is set for tool errors too, so the
	// tool's own explanation is kept.
	Result *Result `json:"result,omitempty"`
	// Error is set when the call failed.
	Error *Error `json:"error,omitempty"`
	// Started and Ended bound the call; Duration is their difference.
	Started  time.Time     `json:"started_at"`
	Ended    time.Time     `json:"ended_at"`
	Duration time.Duration `json:"-"`
	// Attempts counts how many times the tool was invoked (retries included).
	Attempts int `json:"attempts"`
	// Notes is what each layer the call went through did to it, in order.
	Notes []Note `json:"notes,omitempty"`
	// Verdict says whether the caller should roll the turn back.
	Verdict *Verdict `json:"verdict,omitempty"`
	// Instructions is guidance for the model about this tool, to be shown
	// with the result (just-in-time instructions).
	Instructions []string `json:"instructions,omitempty"`
}

// Verdict is the pipeline's advice on a call's outcome: whether the turn that
// made it should be dropped and retried, and why. The pipeline never rolls
// back itself; the caller (an agent loop) decides.
type Verdict struct {
	Rollback bool   `json:"rollback"`
	Reason   string `json:"reason,omitempty"`
}

// Note is one thing a layer did to a call, for the record.
type Note struct {
	// Layer names who wrote the note ("manager", "repair", ...).
	Layer string `json:"layer"`
	// Message describes what was done.
	Message string `json:"message"`
	// Data holds machine-readable details.
	Data map[string]any `json:"data,omitempty"`
}

// Err returns the call's error, or nil when it succeeded. The result is a
// real nil interface when there is no error.
func (r *Record) Err() error {
	if r == nil || r.Error == nil {
		return nil
	}
	return r.Error
}

// Note appends a note to the record.
func (r *Record) Note(layer, message string, data map[string]any) {
	r.Notes = append(r.Notes, Note{Layer: layer, Message: message, Data: data})
}

// MarshalJSON adds duration_ms to the JSON form.
func (r Record) MarshalJSON() ([]byte, error) {
	type plain Record
	return json.Marshal(struct {
		plain
		DurationMS float64 `json:"duration_ms"`
	}{plain(r), float64(r.Duration.Microseconds()) / 1000})
}

// UnmarshalJSON reads the form MarshalJSON writes.
func (r *Record) UnmarshalJSON(b []byte) error {
	type plain Record
	var v struct {
		*plain
		DurationMS float64 `json:"duration_ms"`
	}
	v.plain = (*plain)(r)
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	r.Duration = time.Duration(math.Round(v.DurationMS * float64(time.Millisecond)))
	return nil
}

var idEncoding = base32.NewEncoding("0123456789abcdefghjkmnpqrstvwxyz").WithPadding(base32.NoPadding)

// NewID returns an identifier that sorts by creation time and stays unique
// across processes: 48 bits of milliseconds followed by 80 random bits.
func NewID() string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(time.Now().UnixMilli())<<16)
	_, _ = rand.Read(b[6:])
	return idEncoding.EncodeToString(b[:])
}
