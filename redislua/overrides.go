package redislua

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tierbucket/caddy-tierbucket/store"
)

// The admin overrides of a cluster live in its :cfg hash (field "version" and one field per
// override, see store.Overrides), in the cluster's slot, so a change and its version move
// together in one script. A change is announced on the cluster's :events channel.

// Overrides implements store.Store.
func (s *Store) Overrides(ctx context.Context, cluster string) (store.Overrides, error) {
	all, err := s.client.HGetAll(ctx, s.keys.cfg(cluster)).Result()
	if err != nil {
		s.failed()
		return store.Overrides{}, fmt.Errorf("redislua: overrides: %w", s.classify(err))
	}
	o := store.Overrides{Entries: make(map[string][]byte, len(all))}
	for k, v := range all {
		if k == "version" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return store.Overrides{}, fmt.Errorf("redislua: overrides: version %q: %w", v, err)
			}
			o.Version = uint64(f)
			continue
		}
		o.Entries[k] = []byte(v)
	}
	return o, nil
}

// SetOverride implements store.Store with set_override.lua, then publishes the new version.
// A failed publish is not an error: the other instances see the version in their next report.
func (s *Store) SetOverride(ctx context.Context, cluster string, ch store.OverrideChange) (uint64, error) {
	if err := ch.Validate(); err != nil {
		return 0, fmt.Errorf("redislua: %w", err)
	}
	set := 0
	if ch.Value != nil {
		set = 1
	}
	vals, err := setOverrideScript.Run(ctx, s.client, []string{s.keys.cfg(cluster)}, s.nowArg(), ch.Key,
		string(ch.Value), set, ch.IfVersion, store.MaxOverrideEntries).Slice()
	if err != nil {
		s.failed()
		return 0, fmt.Errorf("redislua: set override: %w", s.classify(err))
	}
	if len(vals) != 2 {
		return 0, fmt.Errorf("redislua: set override: unexpected reply %v", vals)
	}
	status, _ := vals[0].(int64)
	version, err := parseFloat(vals[1])
	if err != nil {
		return 0, fmt.Errorf("redislua: set override: %w", s.classify(err))
	}
	switch status {
	case 0:
		return 0, store.ErrVersionConflict
	case -1:
		return 0, store.ErrTooManyOverrides
	}
	_ = s.client.Publish(ctx, s.keys.events(cluster), uint64(version)).Err()
	return uint64(version), nil
}

// watchRefusedRetry is how long Watch waits before it tries again a subscription Redis refused
// (a missing SUBSCRIBE permission or channel pattern): only an operator can fix it, and each try
// is a new connection.
var watchRefusedRetry = 5 * time.Second

// OnWatchRefused sets f to be called when Redis refuses the subscription of Watch with a
// permanent error (a missing SUBSCRIBE permission or channel pattern: the override
// notifications do not arrive, a change made elsewhere applies at the next report instead):
// at every refused try, first true for the first one since the subscription last succeeded,
// so that the caller reports it once and counts the rest. Set it before the first Watch.
func (s *Store) OnWatchRefused(f func(err store.PermanentError, first bool)) {
	s.watchRefused = f
}

// Watch implements store.Store with a subscription to the cluster's :events channel. go-redis
// connects in the background and resubscribes after a lost connection; a message lost meanwhile
// is repaired by the next report's ConfigVersion.
//
// A subscription Redis refuses (NOPERM) is reported through OnWatchRefused and tried again with
// a new subscription every watchRefusedRetry: go-redis keeps a connection whose SUBSCRIBE was
// refused, and waiting on it would never see the operator's fix.
func (s *Store) Watch(cluster string, notify func()) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	channel := s.keys.events(cluster)
	var (
		mu     sync.Mutex // guards ps and closed: stop closes the subscription the loop waits on
		ps     = s.client.Subscribe(ctx, channel)
		closed bool
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		backoff := 10 * time.Millisecond
		refused := false // the last try was refused (reported once until one succeeds)
		for {
			mu.Lock()
			cur := ps
			mu.Unlock()
			msg, err := cur.Receive(ctx)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				if errors.Is(err, redis.ErrClosed) {
					return
				}
				// A refused permission (NOPERM). A refused connection (credentials,
				// certificates) fails the limiter's own calls too, which report it.
				var p *PermanentError
				if errors.As(s.classify(err), &p) && p.Kind == KindPermission {
					if f := s.watchRefused; f != nil {
						f(p, !refused)
					}
					refused = true
					select {
					case <-ctx.Done():
						return
					case <-time.After(watchRefusedRetry):
					}
					mu.Lock()
					if closed {
						mu.Unlock()
						return
					}
					_ = ps.Close()
					ps = s.client.Subscribe(ctx, channel)
					mu.Unlock()
					continue
				}
				// go-redis reconnects and resubscribes on the next Receive; while Redis is
				// away, try at most once a second.
				select {
				case <-ctx.Done():
					return
				case <-time.After(backoff):
				}
				backoff = min(2*backoff, time.Second)
				continue
			}
			backoff = 10 * time.Millisecond
			switch msg.(type) {
			case *redis.Subscription:
				refused = false
				notify() // a (re)subscription may follow a lost message: look again
			case *redis.Message:
				notify()
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			mu.Lock()
			closed = true
			_ = ps.Close()
			mu.Unlock()
			<-done
		})
	}
}
