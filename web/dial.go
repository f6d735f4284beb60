package web

import (
	"fmt"
	"net/netip"
	"syscall"
)

// deniedAddressError is a connection refused by [WithDenyPrivate].
type deniedAddressError struct {
	addr   netip.Addr
	reason string
}

func (e *deniedAddressError) Error() string {
	return fmt.Sprintf("address %s is %s, and this fetcher does not connect to private addresses", e.addr, e.reason)
}

// Address ranges refused besides those netip classifies itself.
var (
	// cgnat is carrier-grade NAT space; some clouds put their metadata
	// service in it (100.100.100.200).
	cgnat = netip.MustParsePrefix("100.64.0.0/10")
	// thisNetwork (0.0.0.0/8) reaches the local host on Linux.
	thisNetwork = netip.MustParsePrefix("0.0.0.0/8")
)

// denyPrivateControl is the net.Dialer's Control function under
// [WithDenyPrivate]. It runs after name resolution, on the address about to
// be dialled, so neither a redirect nor a DNS answer that changes between
// lookups (rebinding) gets past it.
func denyPrivateControl(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("unexpected address %q: %w", address, err)
	}
	if reason := privateReason(ap.Addr()); reason != "" {
		return &deniedAddressError{addr: ap.Addr(), reason: reason}
	}
	return nil
}

// privateReason says why an address is not public, "" when it is.
func privateReason(a netip.Addr) string {
	a = a.Unmap()
	switch {
	case a.IsLoopback():
		return "a loopback address"
	case a.IsPrivate():
		return "a private address"
	case a.IsLinkLocalUnicast(), a.IsLinkLocalMulticast():
		return "a link-local address"
	case a.IsUnspecified(), thisNetwork.Contains(a):
		return "an unspecified address"
	case a.IsMulticast(), a.IsInterfaceLocalMulticast():
		return "a multicast address"
	case cgnat.Contains(a):
		return "a carrier-grade NAT address"
	}
	return ""
}
