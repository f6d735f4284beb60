package vault

import (
	"context"
	"fmt"
)

// CopyReport is what Copy did.
type CopyReport struct {
	// Owners is how many owners had entries to copy.
	Owners int
	// Copied counts the entries written to the destination.
	Copied int
	// Kept counts the entries the destination had already, left as they
	// were: the destination's are the ones in use.
	Kept int
}

// Copy copies every entry of from into v's store as it is, sealed: the
// owner, the name and the key's id are what a sealed value is bound to,
// so it opens there with the key that sealed it, and nothing is opened
// here (a locked vault copies too). An entry v's store has already is
// kept. v's bounds hold: an owner with max_entries_per_owner entries
// there refuses one more (KindTooMany), and the copy stops, with what
// was copied so far reported; run again, it goes on.
func (v *Vault) Copy(ctx context.Context, from Store) (CopyReport, error) {
	var rep CopyReport
	owners, err := from.Owners(ctx)
	if err != nil {
		return rep, err
	}
	for _, owner := range owners {
		es, err := from.List(ctx, owner)
		if err != nil {
			return rep, named(err, owner, "")
		}
		if len(es) > 0 {
			rep.Owners++
		}
		for _, e := range es {
			if len(e.Sealed) > v.opts.MaxValueBytes+SealOverhead {
				return rep, &Error{Kind: KindTooLarge, Owner: owner, Name: e.Name, Limit: v.opts.MaxValueBytes,
					Message: fmt.Sprintf("a sealed value of %d bytes, more than the %d bytes vault.max_value_bytes allows here (and the sealing's %d)",
						len(e.Sealed), v.opts.MaxValueBytes, SealOverhead)}
			}
			copied := false
			err := v.store.Update(ctx, owner, e.Name, v.opts.MaxEntriesPerOwner, func(cur *Entry) ([]byte, error) {
				copied = cur == nil
				if !copied {
					return nil, nil
				}
				return e.Sealed, nil
			})
			if err != nil {
				return rep, named(err, owner, e.Name)
			}
			if copied {
				rep.Copied++
			} else {
				rep.Kept++
			}
		}
	}
	return rep, nil
}
