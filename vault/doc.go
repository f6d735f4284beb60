// Package vault keeps credentials of toolmux's users, encrypted at rest:
// the OAuth tokens toolmux holds for the upstream servers it calls on a
// user's behalf, and the secrets (an API key) a user sets for a server.
//
// An entry is a value (bytes) kept under an owner and a name. The owner is
// whose it is: the key of the caller, identity.Caller.Key() ("key:ann",
// or an issuer and a subject). The name says what it is:
// "server/NAME/token" (TokenName) or "server/NAME/secret/SECRET"
// (SecretName), though any name of the form (CheckName) may be used.
//
// Each value is sealed with AES-256-GCM (crypto/cipher) under the vault's
// current key: a random nonce for every write, and the owner, the name and
// the id of the key bound as additional data, so that a sealed value
// copied under another owner or another name does not open. A sealed
// value records which key sealed it: a key ring of the current key and
// previous ones opens what any of them sealed, and Rotate re-seals every
// entry with the current key, one entry at a time, so that a rotation cut
// short leaves every entry readable and is finished by running it again.
//
// The keys come from a file (mode 0600) or an environment variable, never
// from the configuration. Without a key the vault is locked: Put and Get
// return an *Error of KindLocked that says how to configure one, and
// nothing else changes.
//
// Where the sealed values are kept is a Store: FileStore, a file per owner
// in the data directory, shared by the processes of a machine; or
// vault/jsvault, a JetStream key-value bucket, shared by a fleet (the key
// stays on the machines: the bucket holds sealed values only). Owners and
// names are kept in the clear, so that they can be listed and counted
// without the key; values never are. docs/vault.md says how to set it up
// and how to rotate the key.
package vault
