package redislua

import (
	"encoding/json"
	"sync"

	"github.com/redis/go-redis/v9"
)

// The process-wide client pool: handlers (and config reloads) with identical connection
// settings share one client instead of opening a connection pool each.
var pool = struct {
	sync.Mutex
	clients map[string]*pooledClient
}{clients: map[string]*pooledClient{}}

type pooledClient struct {
	client redis.UniversalClient
	refs   int
}

// Open validates cfg and returns a Store on a shared client: Stores opened with the same
// connection settings (everything but KeyPrefix) share one client, which is closed when the
// last of them is closed.
func Open(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	conn := cfg
	conn.KeyPrefix = ""
	b, err := json.Marshal(conn)
	if err != nil {
		return nil, err
	}
	key := string(b)

	pool.Lock()
	defer pool.Unlock()
	pc := pool.clients[key]
	if pc == nil {
		client, err := cfg.newClient()
		if err != nil {
			return nil, err
		}
		pc = &pooledClient{client: client}
		pool.clients[key] = pc
	}
	pc.refs++
	s := New(pc.client, cfg.KeyPrefix)
	var once sync.Once
	s.release = func() error {
		var err error
		once.Do(func() {
			pool.Lock()
			defer pool.Unlock()
			pc.refs--
			if pc.refs == 0 {
				delete(pool.clients, key)
				err = pc.client.Close()
			}
		})
		return err
	}
	return s, nil
}
