package router

import (
	"context"
	"sync"
)

// Fanout bounds how many shard calls one scattered request has out at
// once: enough that a request over every shard of a usual map costs one
// round trip, few enough that one request over a large map does not open
// a call to every shard together.
const Fanout = 16

// Part is one shard's part of a scattered request: the shard and, for a
// request whose items are split by shard, the indexes of its items in the
// request, in request order (nil for a request that asks every shard the
// same thing).
type Part struct {
	Shard uint32
	Items []int
}

// Answer is what one part's call returned.
type Answer[T any] struct {
	Part
	Value T
	Err   error
}

// PlanShards is one part per shard of the map, in shard order. It fails
// with a *NotReadyError while the shard map is not loaded, rather than
// plan nothing and let the request pass for one over no shards.
func (r *Router) PlanShards() ([]Part, error) {
	n, err := r.shards()
	if err != nil {
		return nil, err
	}
	plan := make([]Part, n)
	for id := range n {
		plan[id] = Part{Shard: id}
	}
	return plan, nil
}

// PlanItems splits n items by shard: shardOf names item i's shard, or
// false for an item that goes nowhere (refused before it is sent). Parts
// come in the order of their first item, so a plan, and the order of its
// answers, follows the request.
func PlanItems(n int, shardOf func(i int) (id uint32, ok bool)) []Part {
	var plan []Part
	at := map[uint32]int{}
	for i := range n {
		id, ok := shardOf(i)
		if !ok {
			continue
		}
		k, seen := at[id]
		if !seen {
			k = len(plan)
			at[id] = k
			plan = append(plan, Part{Shard: id})
		}
		plan[k].Items = append(plan[k].Items, i)
	}
	return plan
}

// Scatter calls fn for every part of plan, at most Fanout at once, and
// returns the answers in plan order once every call has ended. Each part
// answers for itself: one shard failing does not stop the others. Once
// ctx ends, parts not yet started are not started and answer ctx.Err();
// calls already out see ctx end.
func Scatter[T any](ctx context.Context, plan []Part, fn func(context.Context, Part) (T, error)) []Answer[T] {
	return scatter(ctx, plan, Fanout, fn)
}

func scatter[T any](ctx context.Context, plan []Part, limit int, fn func(context.Context, Part) (T, error)) []Answer[T] {
	out := make([]Answer[T], len(plan))
	for i, p := range plan {
		out[i].Part = p
	}
	if len(plan) == 1 {
		// No goroutine for the common single-shard request.
		if out[0].Err = ctx.Err(); out[0].Err == nil {
			out[0].Value, out[0].Err = fn(ctx, plan[0])
		}
		return out
	}
	slots := make(chan struct{}, max(limit, 1))
	var wg sync.WaitGroup
	for i := range out {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			out[i].Err = ctx.Err()
			continue
		}
		if err := ctx.Err(); err != nil {
			<-slots
			out[i].Err = err
			continue
		}
		wg.Add(1)
		go func(a *Answer[T]) {
			defer func() { <-slots; wg.Done() }()
			a.Value, a.Err = fn(ctx, a.Part)
		}(&out[i])
	}
	wg.Wait()
	return out
}
