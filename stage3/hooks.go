package stage3

// The model calls these at its units' boundaries. A gathered group is
// needed at the first of its units the pass reaches (the first in
// forward, the last in backward) and done after the last; a unit's
// borrowed groups (the embeddings a tied head reads) are needed and done
// around that unit alone.

// BeforeForward gathers the parameters unit u reads.
func (s *Strategy) BeforeForward(u int) error {
	f := &s.f
	if f.phase == idle {
		f.begin()
	}
	f.to(forward)
	g := s.groupOf[u]
	if u == s.groups[g].Units[0] {
		if err := f.need(g); err != nil {
			return err
		}
	}
	return s.borrowed(u, g, f.need)
}

// AfterForward releases what unit u read, unless it is kept.
func (s *Strategy) AfterForward(u int) error {
	g := s.groupOf[u]
	if us := s.groups[g].Units; u == us[len(us)-1] {
		s.f.done(g)
	}
	return s.borrowed(u, g, func(b int) error { s.f.done(b); return nil })
}

// BeforeBackward gathers the parameters unit u reads (again, if they
// were released after forward) and makes its gradients live.
func (s *Strategy) BeforeBackward(u int) error {
	f := &s.f
	if f.phase == idle {
		f.begin()
	}
	f.to(backward)
	if err := s.r.before(u); err != nil {
		return err
	}
	g := s.groupOf[u]
	if us := s.groups[g].Units; u == us[len(us)-1] {
		if err := f.need(g); err != nil {
			return err
		}
	}
	return s.borrowed(u, g, f.need)
}

// AfterBackward releases what unit u read and reduce-scatters the
// gradients that are now complete; after the pass's last unit it waits
// for every reduction and ends the pass.
func (s *Strategy) AfterBackward(u int) error {
	f := &s.f
	g := s.groupOf[u]
	if u == s.groups[g].Units[0] {
		f.done(g)
	}
	if err := s.borrowed(u, g, func(b int) error { f.done(b); return nil }); err != nil {
		return err
	}
	end, err := s.r.after(u)
	if err != nil || !end {
		return err
	}
	return f.end()
}

// borrowed calls fn for each group unit u borrows other than its own g.
func (s *Strategy) borrowed(u, g int, fn func(int) error) error {
	for _, b := range s.l.Units[u].Borrows {
		if bg := s.groupOf[b]; bg != g {
			if err := fn(bg); err != nil {
				return err
			}
		}
	}
	return nil
}
