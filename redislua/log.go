package redislua

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// RouteLogs routes go-redis' own log lines (dial errors, sentinel and cluster notices) into
// zap instead of plain text on stderr. go-redis has one process-wide logger, so it is installed
// once per process; base is asked for the process's logger at each line, so the lines follow
// the logging configuration of whatever config is running. They are logged at DEBUG under the
// name "rate_limit.redis", because the limiter already reports what they mean (a WARN when the
// Store fails, an INFO when it recovers); a fault that lasts produces the same line thousands
// of times, so each format is sampled: the first 3 per 10 s, then none.
func RouteLogs(base func() *zap.Logger) {
	routeOnce.Do(func() { redis.SetLogger(&zapLogging{base: base}) })
}

var routeOnce sync.Once

// zapLogging adapts a zap logger to go-redis' Logging interface. The format string is the
// message (constant per call site, so the sampler groups the lines), the formatted line a field.
type zapLogging struct {
	base func() *zap.Logger

	mu      sync.Mutex
	last    *zap.Logger // the base logger sampled is built on
	sampled *zap.Logger
}

// logger is the sampled logger over the current base logger.
func (z *zapLogging) logger() *zap.Logger {
	b := z.base()
	z.mu.Lock()
	defer z.mu.Unlock()
	if b != z.last {
		z.last = b
		z.sampled = b.Named("rate_limit.redis").WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
			return zapcore.NewSamplerWithOptions(c, 10*time.Second, 3, 0)
		}))
	}
	return z.sampled
}

func (z *zapLogging) Printf(_ context.Context, format string, v ...any) {
	if ce := z.logger().Check(zapcore.DebugLevel, format); ce != nil {
		ce.Write(zap.String("detail", fmt.Sprintf(format, v...)))
	}
}
