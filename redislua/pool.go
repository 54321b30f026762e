package redislua

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"sync"

	"github.com/redis/go-redis/v9"
)

// The process-wide client pool: handlers (and config reloads) with identical connection
// settings share one client instead of opening a connection pool each.
var pool = struct {
	sync.Mutex
	clients map[string][]*pooledClient // by connection settings; RootCAs (not JSON) tell them apart
}{clients: map[string][]*pooledClient{}}

type pooledClient struct {
	client redis.UniversalClient
	roots  *x509.CertPool
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
	cert, err := cfg.loadClientCert()
	if err != nil {
		return nil, err
	}
	conn := cfg
	conn.KeyPrefix = ""
	b, err := json.Marshal(conn) //nolint:gosec // G117: the JSON is only an in-memory map key, never written out
	if err != nil {
		return nil, err
	}
	key := string(b)
	if cert != nil {
		// A renewed certificate in the same files makes a new client.
		h := sha256.Sum256(cert.Certificate[0])
		key += hex.EncodeToString(h[:])
	}

	pool.Lock()
	defer pool.Unlock()
	var pc *pooledClient
	for _, c := range pool.clients[key] {
		if c.roots.Equal(cfg.RootCAs) {
			pc = c
			break
		}
	}
	if pc == nil {
		client, err := cfg.newClient(cert)
		if err != nil {
			return nil, err
		}
		pc = &pooledClient{client: client, roots: cfg.RootCAs}
		pool.clients[key] = append(pool.clients[key], pc)
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
				list := pool.clients[key]
				for i, c := range list {
					if c == pc {
						list = append(list[:i], list[i+1:]...)
						break
					}
				}
				if len(list) == 0 {
					delete(pool.clients, key)
				} else {
					pool.clients[key] = list
				}
				err = pc.client.Close()
			}
		})
		return err
	}
	return s, nil
}
