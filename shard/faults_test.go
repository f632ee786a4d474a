package shard

import (
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"

	"github.com/raftq/raftq/raftgroup"
)

// storeFault injects faults under one replica's raft stores: appends and
// stable-store writes can be made to block until released or to fail, and
// the free space the watch sees can be set.
type storeFault struct {
	mu      sync.Mutex
	block   chan struct{} // non-nil: writes wait until it is closed
	failLog error         // non-nil: appends fail with it
	blocked atomic.Int32  // writes waiting on block now
	free    atomic.Uint64 // what raftgroup.DiskSpace reports
}

func newStoreFault() *storeFault {
	f := &storeFault{}
	f.free.Store(1 << 40)
	return f
}

// stall makes writes block until the returned func is called.
func (f *storeFault) stall() (release func()) {
	ch := make(chan struct{})
	f.mu.Lock()
	f.block = ch
	f.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			f.block = nil
			f.mu.Unlock()
			close(ch)
		})
	}
}

// failAppends makes appends fail with err (nil: succeed again).
func (f *storeFault) failAppends(err error) {
	f.mu.Lock()
	f.failLog = err
	f.mu.Unlock()
}

func (f *storeFault) before(isAppend bool) error {
	f.mu.Lock()
	block, fail := f.block, f.failLog
	f.mu.Unlock()
	if block != nil {
		f.blocked.Add(1)
		<-block
		f.blocked.Add(-1)
	}
	if isAppend && fail != nil {
		return fail
	}
	return nil
}

type faultyLogs struct {
	raft.LogStore
	f *storeFault
}

func (l *faultyLogs) StoreLog(log *raft.Log) error { return l.StoreLogs([]*raft.Log{log}) }

func (l *faultyLogs) StoreLogs(logs []*raft.Log) error {
	if err := l.f.before(true); err != nil {
		return err
	}
	return l.LogStore.StoreLogs(logs)
}

func (l *faultyLogs) IsMonotonic() bool {
	m, ok := l.LogStore.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

type faultyStable struct {
	raft.StableStore
	f *storeFault
}

func (s *faultyStable) Set(k, v []byte) error {
	if err := s.f.before(false); err != nil {
		return err
	}
	return s.StableStore.Set(k, v)
}

func (s *faultyStable) SetUint64(k []byte, v uint64) error {
	if err := s.f.before(false); err != nil {
		return err
	}
	return s.StableStore.SetUint64(k, v)
}

// withDiskFaults gives every replica of a test cluster a storeFault and
// the disk options o.
func withDiskFaults(o raftgroup.DiskOptions) func(*cluster) {
	return func(c *cluster) { c.disk = &o }
}

func (c *cluster) diskOptions() raftgroup.DiskOptions {
	if c.disk == nil {
		return raftgroup.DiskOptions{}
	}
	return *c.disk
}

func (c *cluster) diskHooks(nd *node) *raftgroup.DiskTestHooks {
	if c.disk == nil {
		return nil
	}
	if nd.disk == nil {
		nd.disk = newStoreFault()
	}
	f := nd.disk
	return &raftgroup.DiskTestHooks{
		Logs:   func(s raft.LogStore) raft.LogStore { return &faultyLogs{LogStore: s, f: f} },
		Stable: func(s raft.StableStore) raft.StableStore { return &faultyStable{StableStore: s, f: f} },
		Space:  func(string) (uint64, uint64, error) { return f.free.Load(), 1 << 41, nil },
	}
}
