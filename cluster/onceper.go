package cluster

import "sync"

// oncePerReason tells a duty that retries every pass whether its latest
// failure says something new: a node that stays down would otherwise log
// the same line every second. The zero value is ready; safe for
// concurrent use.
type oncePerReason struct {
	mu   sync.Mutex
	last string
}

// changed records err (nil: no failure) and reports whether it is a
// failure other than the last one recorded.
func (o *oncePerReason) changed(err error) bool {
	why := ""
	if err != nil {
		why = err.Error()
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	changed := why != o.last
	o.last = why
	return err != nil && changed
}

// reset forgets the last failure (a new meta term starts afresh).
func (o *oncePerReason) reset() {
	o.mu.Lock()
	o.last = ""
	o.mu.Unlock()
}
