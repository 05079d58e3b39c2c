package controller

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/ferrypkg/ferry/deploy/rollout"
)

// DefaultGCQuiet is how long the registry's garbage collection waits after
// the last removal, so that one collection serves a batch of them.
const DefaultGCQuiet = time.Second

// gcMaxWait bounds how long a removal waits for its collection while other
// removals keep coming: then one starts anyway.
const gcMaxWait = 30 * time.Second

// collector runs the registry's garbage collection once for a batch of
// removals. Each removal (rollout.Uninstall with DeferGC) is counted while it
// runs, then asks for a collection and gets a ticket; a Package keeps its
// finalizer until a collection that started after its ask has ended. A
// collection starts, in the reconcile of one waiting Package, when no
// removal is running and none ended for quiet (or the oldest ask waited
// gcMaxWait), and serves every ask made before it started. Tickets live in
// memory: after a restart, a deleted Package's removal finds no record and
// asks again.
type collector struct {
	mu sync.Mutex
	// asked is the last ticket given; done the last one a finished
	// collection served (with result and err).
	asked, done uint64
	result      rollout.Storage
	err         error
	// tickets are the waiting Packages' tickets.
	tickets map[types.UID]uint64
	// removing counts the removals running; last is when one last ended,
	// oldest when the oldest unserved ask was made.
	removing     int
	last, oldest time.Time
	collecting   bool
}

// begin counts a removal in; end counts it out.
func (c *collector) begin() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removing++
}

func (c *collector) end(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removing--
	c.last = now
}

// ask gives Package uid a ticket for the next collection.
func (c *collector) ask(uid types.UID, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tickets == nil {
		c.tickets = map[types.UID]uint64{}
	}
	if c.asked == c.done {
		c.oldest = now
	}
	c.asked++
	c.tickets[uid] = c.asked
	c.last = now
}

// waiting tells whether Package uid has a ticket.
func (c *collector) waiting(uid types.UID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.tickets[uid]
	return ok
}

// settle tells what the collection serving Package uid's ticket found
// (ok), running it now with collect if it is time and none runs. Not ok,
// the caller asks again after the quiet time. A failed collection's error
// is returned to each Package it served, whose ticket is dropped: its next
// reconcile asks again.
func (c *collector) settle(ctx context.Context, uid types.UID, now time.Time, quiet time.Duration, collect func(context.Context) (rollout.Storage, error)) (res rollout.Storage, ok bool, err error) {
	c.mu.Lock()
	t := c.tickets[uid]
	if t <= c.done {
		delete(c.tickets, uid)
		res, err = c.result, c.err
		c.mu.Unlock()
		return res, true, err
	}
	due := now.Sub(c.oldest) >= gcMaxWait || (c.removing == 0 && now.Sub(c.last) >= quiet)
	if c.collecting || !due {
		c.mu.Unlock()
		return res, false, nil
	}
	c.collecting = true
	target := c.asked
	c.mu.Unlock()

	res, err = collect(ctx)

	c.mu.Lock()
	defer c.mu.Unlock()
	c.collecting = false
	c.done, c.result, c.err = target, res, err
	if c.asked != c.done {
		c.oldest = now
	}
	delete(c.tickets, uid)
	return res, true, err
}
