package vault

import (
	"context"
	"slices"
)

// RotateReport is what a rotation did.
type RotateReport struct {
	// Owners is how many owners' entries were gone through.
	Owners int `json:"owners"`
	// Resealed is how many entries were re-sealed with the current key.
	Resealed int `json:"resealed"`
	// Current is how many were sealed with it already.
	Current int `json:"current"`
	// Failed are the entries that could not be re-sealed (a key not
	// configured, a value damaged): each an *Error naming the entry.
	Failed []error `json:"-"`
}

// Progress is told of each owner a rotation has gone through.
type Progress func(owner string, resealed, current int)

// Rotate re-seals every entry that is not sealed with the current key,
// with it. Each entry is re-sealed on its own, atomically (Store.Update:
// an entry written meanwhile, by a gateway refreshing a token, is re-read,
// never overwritten with its old value), so a rotation cut short (a
// crash, a kill, an error) leaves every entry sealed with either key, and
// readable with both; running it again finishes it, re-sealing only what
// is left. An entry that cannot be opened is left as it is and reported in
// Failed; the rotation goes on with the others. The error is the store's
// or ctx's, which stop it.
func (v *Vault) Rotate(ctx context.Context, progress Progress) (RotateReport, error) {
	var rep RotateReport
	if v.ring == nil {
		return rep, lockedError("", "")
	}
	owners, err := v.store.Owners(ctx)
	if err != nil {
		return rep, err
	}
	for _, owner := range owners {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		es, err := v.store.List(ctx, owner)
		if err != nil {
			return rep, named(err, owner, "")
		}
		resealed, current := 0, 0
		for _, e := range es {
			if err := ctx.Err(); err != nil {
				return rep, err
			}
			did, err := v.reseal(ctx, owner, e.Name)
			switch {
			case IsNotFound(err):
				// Deleted meanwhile: nothing left to re-seal.
			case err != nil && isEntryError(err):
				rep.Failed = append(rep.Failed, named(err, owner, e.Name))
			case err != nil:
				return rep, err
			case did:
				resealed++
			default:
				current++
			}
		}
		rep.Owners++
		rep.Resealed += resealed
		rep.Current += current
		if progress != nil {
			progress(owner, resealed, current)
		}
	}
	return rep, nil
}

// reseal re-seals one entry with the current key, unless it is sealed
// with it already.
func (v *Vault) reseal(ctx context.Context, owner, name string) (did bool, err error) {
	err = v.store.Update(ctx, owner, name, v.opts.MaxEntriesPerOwner, func(cur *Entry) ([]byte, error) {
		did = false
		if cur == nil {
			return nil, NotFound(owner, name)
		}
		if SealedKeyID(cur.Sealed) == v.ring.Current() {
			return nil, nil
		}
		value, err := v.ring.open(owner, name, cur.Sealed)
		if err != nil {
			return nil, err
		}
		defer clear(value)
		did = true
		return v.ring.seal(owner, name, value), nil
	})
	return did, err
}

// isEntryError says whether err is about one entry (which a rotation
// reports and goes past) rather than the store.
func isEntryError(err error) bool {
	switch KindOf(err) {
	case KindWrongKey, KindCorrupt:
		return true
	}
	return false
}

// Status is what the vault holds, counted without opening a value.
type Status struct {
	// Locked is true when no key is configured.
	Locked bool `json:"locked"`
	// CurrentKey and PreviousKeys are the ids of the keys configured.
	CurrentKey   string   `json:"current_key,omitempty"`
	PreviousKeys []string `json:"previous_keys,omitempty"`
	// Owners and Entries count what the store holds.
	Owners  int `json:"owners"`
	Entries int `json:"entries"`
	// ByKey counts the entries by the id of the key that sealed them;
	// "" counts what is not a sealed value.
	ByKey map[string]int `json:"by_key"`
	// Unopened counts the entries sealed by keys that are not configured
	// (and those that are no sealed value): what the vault cannot open.
	Unopened int `json:"unopened"`
	// ToRotate counts the entries sealed by previous keys: what a
	// rotation would re-seal.
	ToRotate int `json:"to_rotate"`
}

// Status counts the vault's owners and entries, and the keys that sealed
// them. It needs no key, and opens nothing.
func (v *Vault) Status(ctx context.Context) (Status, error) {
	st := Status{Locked: v.ring == nil, ByKey: map[string]int{}}
	if v.ring != nil {
		st.CurrentKey, st.PreviousKeys = v.ring.Current(), v.ring.Previous()
	}
	owners, err := v.store.Owners(ctx)
	if err != nil {
		return st, err
	}
	for _, owner := range owners {
		es, err := v.store.List(ctx, owner)
		if err != nil {
			return st, named(err, owner, "")
		}
		if len(es) == 0 {
			continue
		}
		st.Owners++
		for _, e := range es {
			id := SealedKeyID(e.Sealed)
			st.Entries++
			st.ByKey[id]++
			switch {
			case v.ring == nil:
			case id == st.CurrentKey:
			case slices.Contains(st.PreviousKeys, id):
				st.ToRotate++
			default:
				st.Unopened++
			}
		}
	}
	return st, nil
}

// Check opens every entry (with the vault's keys) and returns the errors
// of those that do not open, each an *Error naming the entry: what a
// rotation would leave behind. It needs the key.
func (v *Vault) Check(ctx context.Context) (checked int, failed []error, err error) {
	if v.ring == nil {
		return 0, nil, lockedError("", "")
	}
	owners, err := v.store.Owners(ctx)
	if err != nil {
		return 0, nil, err
	}
	for _, owner := range owners {
		es, err := v.store.List(ctx, owner)
		if err != nil {
			return checked, failed, named(err, owner, "")
		}
		for _, e := range es {
			checked++
			b, err := v.ring.open(owner, e.Name, e.Sealed)
			clear(b)
			if err != nil {
				failed = append(failed, named(err, owner, e.Name))
			}
		}
	}
	return checked, failed, nil
}
