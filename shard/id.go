package shard

// ID is the shard id.
func (s *Shard) ID() uint32 { return s.cfg.ID }
