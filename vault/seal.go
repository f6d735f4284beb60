package vault

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
)

// A sealed value, as every store keeps it:
//
//	byte 0       format version (1)
//	bytes 1-8    id of the key that sealed it
//	bytes 9-20   nonce (96 random bits, new for every write)
//	bytes 21-    AES-256-GCM ciphertext of the value, and its 16-byte tag
//
// The additional data authenticated with it is a label, the owner and the
// name (each preceded by its length, so that no two pairs give the same
// bytes), and the first 9 bytes: a sealed value opens only as the entry
// it was sealed for, and its header cannot be changed without the tag
// failing.
const (
	sealVersion  = 1
	nonceSize    = 12
	tagSize      = 16
	headerSize   = 1 + keyIDSize
	sealOverhead = headerSize + nonceSize + tagSize
)

// SealOverhead is how many bytes a sealed value has more than its value:
// what a store must allow above Options.MaxValueBytes.
const SealOverhead = sealOverhead

const aadLabel = "toolmux vault entry v1\x00"

// envelope is a sealed value's parts.
type envelope struct {
	keyID [keyIDSize]byte
	// nonce and box (ciphertext and tag) are slices of the sealed value.
	nonce, box []byte
}

// parseSealed reads the parts of a sealed value; an *Error of KindCorrupt
// for bytes that are not one.
func parseSealed(b []byte) (envelope, error) {
	var e envelope
	if len(b) < sealOverhead {
		return e, &Error{Kind: KindCorrupt, Message: fmt.Sprintf("not a sealed value (%d bytes, fewer than the %d of an empty one)", len(b), sealOverhead)}
	}
	if b[0] != sealVersion {
		return e, &Error{Kind: KindCorrupt, Message: fmt.Sprintf("not a sealed value of a format this toolmux reads (version %d, where it reads %d)", b[0], sealVersion)}
	}
	copy(e.keyID[:], b[1:headerSize])
	e.nonce = b[headerSize : headerSize+nonceSize]
	e.box = b[headerSize+nonceSize:]
	return e, nil
}

// SealedKeyID returns the id of the key that sealed b, "" when b is not a
// sealed value: what a status counts without opening anything.
func SealedKeyID(b []byte) string {
	e, err := parseSealed(b)
	if err != nil {
		return ""
	}
	return hex.EncodeToString(e.keyID[:])
}

// aad is the additional data of the entry (owner, name) sealed with the
// header hdr.
func aad(owner, name string, hdr []byte) []byte {
	b := make([]byte, 0, len(aadLabel)+2*binary.MaxVarintLen64+len(owner)+len(name)+len(hdr))
	b = append(b, aadLabel...)
	b = binary.AppendUvarint(b, uint64(len(owner)))
	b = append(b, owner...)
	b = binary.AppendUvarint(b, uint64(len(name)))
	b = append(b, name...)
	return append(b, hdr...)
}

// seal seals value for the entry (owner, name) with the current key.
func (r *Keyring) seal(owner, name string, value []byte) []byte {
	k := r.current
	out := make([]byte, headerSize+nonceSize, sealOverhead+len(value))
	out[0] = sealVersion
	copy(out[1:headerSize], k.id[:])
	rand.Read(out[headerSize:]) // never fails (crypto/rand)
	return k.aead.Seal(out, out[headerSize:], value, aad(owner, name, out[:headerSize]))
}

// open opens the sealed value b of the entry (owner, name): the value, or
// an *Error of KindCorrupt (not a sealed value, or not one of this entry
// under its key) or KindWrongKey (a key the ring does not have).
func (r *Keyring) open(owner, name string, b []byte) ([]byte, error) {
	e, err := parseSealed(b)
	if err != nil {
		return nil, err
	}
	id := hex.EncodeToString(e.keyID[:])
	k := r.key(e.keyID)
	if k == nil {
		return nil, &Error{Kind: KindWrongKey, KeyID: id, Message: fmt.Sprintf(
			"sealed by key %s, which is not configured (the current key is %s): configure it as a previous key (vault.previous_key_files or vault.previous_key_envs) to open it",
			id, r.current.ID())}
	}
	v, err := k.aead.Open(nil, e.nonce, e.box, aad(owner, name, b[:headerSize]))
	if err != nil {
		return nil, &Error{Kind: KindCorrupt, KeyID: id, Message: fmt.Sprintf(
			"does not open with key %s, which sealed it: it was changed, or copied from another entry", id)}
	}
	return v, nil
}
