package fleet

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/toolmux/toolmux/internal/privfile"
)

// Credentials prove a member of the fleet to its NATS server: its nkey,
// whose seed signs the server's challenge at every connection (the seed
// itself never leaves the member).
type Credentials struct {
	// PublicKey is the member's public nkey (U…).
	PublicKey string
	// From says where they come from, for messages: a file's path.
	From string
	opt  nats.Option
}

// CredentialsError is a credentials file that cannot be used.
type CredentialsError struct {
	Path   string
	Reason string
	Err    error
}

func (e *CredentialsError) Error() string {
	msg := fmt.Sprintf("fleet credentials %s: %s", e.Path, e.Reason)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *CredentialsError) Unwrap() error { return e.Err }

// LoadCredentials reads a member's credentials from the file at path: an
// nkey seed file (what toolmux fleet add prints and toolmux fleet nkey
// writes; the nats tool's --nkey file), or a NATS credentials file (a user
// JWT and its seed, for a NATS server in operator mode). The file must be
// its owner's only: a seed others can read is no secret.
func LoadCredentials(path string) (*Credentials, error) {
	b, _, err := readPrivate(path)
	if err != nil {
		var me *privfile.ModeError
		if errors.As(err, &me) {
			return nil, &CredentialsError{Path: path, Reason: "others could read the seed", Err: err}
		}
		if errors.Is(err, fs.ErrNotExist) {
			return nil, &CredentialsError{Path: path, Reason: "no such file (toolmux fleet add or toolmux fleet nkey makes one)"}
		}
		return nil, &CredentialsError{Path: path, Reason: "cannot read it", Err: err}
	}
	defer wipe(b)
	if bytes.Contains(b, []byte("BEGIN NATS USER JWT")) {
		token, err := jwt.ParseDecoratedJWT(b)
		if err == nil {
			var uc *jwt.UserClaims
			if uc, err = jwt.DecodeUserClaims(token); err == nil {
				return &Credentials{PublicKey: uc.Subject, From: path, opt: nats.UserCredentials(path)}, nil
			}
		}
		return nil, &CredentialsError{Path: path, Reason: "not a NATS credentials file", Err: err}
	}
	kp, err := nkeys.ParseDecoratedUserNKey(b)
	if err != nil {
		return nil, &CredentialsError{Path: path, Reason: "holds no user nkey seed (SU…)", Err: err}
	}
	pub, _ := kp.PublicKey()
	kp.Wipe()
	// The seed is read again at each connection, and not kept.
	opt, err := nats.NkeyOptionFromSeed(path)
	if err != nil {
		return nil, &CredentialsError{Path: path, Reason: "holds no user nkey seed", Err: err}
	}
	return &Credentials{PublicKey: pub, From: path, opt: opt}, nil
}

// keyCredentials are the credentials of kp, kept in memory: the
// embedded server's own gateway's.
func keyCredentials(kp nkeys.KeyPair) *Credentials {
	pub, _ := kp.PublicKey()
	return &Credentials{PublicKey: pub, From: "the gateway's own key", opt: nats.Nkey(pub, kp.Sign)}
}

// NewSeed makes a member's nkey: the content of its seed file (a comment
// saying whose it is, then the seed: a file the nats tool reads too) and
// its public key. what names the member in the comment.
func NewSeed(what string) (file []byte, public string, err error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, "", err
	}
	defer kp.Wipe()
	seed, err := kp.Seed()
	if err != nil {
		return nil, "", err
	}
	public, _ = kp.PublicKey()
	var b bytes.Buffer
	fmt.Fprintf(&b, "# toolmux fleet: the nkey seed of %s (public key %s).\n", what, public)
	b.WriteString("# It proves who you are to the fleet's NATS server: keep this file yours only (chmod 600).\n")
	b.Write(seed)
	b.WriteByte('\n')
	wipe(seed)
	return b.Bytes(), public, nil
}

func wipe(b []byte) {
	for i := range b {
		b[i] = 'x'
	}
}
