package cluster

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"strconv"
	"sync"
)

// InstanceID is this process's id in the fleet: hostname, pid and a random part (a restarted
// process is a new instance), made once per process.
var InstanceID = sync.OnceValue(func() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "caddy"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return host + "-" + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b[:])
})
