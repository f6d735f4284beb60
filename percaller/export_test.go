package percaller

// Busy counts the calls in flight over owner's connection.
func (s *Source) Busy(owner string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.conns[owner]; c != nil {
		return c.busy
	}
	return 0
}

// MaxTried is maxTried.
const MaxTried = maxTried
