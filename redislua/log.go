package redislua

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// SetLogger routes go-redis' own log lines (dial errors, sentinel and cluster notices) into
// logger instead of plain text on stderr. go-redis has one process-wide logger, so the last
// call wins. Lines are logged at DEBUG, because the limiter already reports what they mean
// (a WARN when the Store fails, an INFO when it recovers); a fault that lasts produces the
// same line thousands of times, so each format is sampled: the first 3 per 10 s, then none.
func SetLogger(logger *zap.Logger) {
	logger = logger.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return zapcore.NewSamplerWithOptions(c, 10*time.Second, 3, 0)
	}))
	redis.SetLogger(zapLogging{logger})
}

// zapLogging adapts a zap logger to go-redis' Logging interface. The format string is the
// message (constant per call site, so the sampler groups the lines), the formatted line a field.
type zapLogging struct{ l *zap.Logger }

func (z zapLogging) Printf(_ context.Context, format string, v ...any) {
	if ce := z.l.Check(zapcore.DebugLevel, format); ce != nil {
		ce.Write(zap.String("detail", fmt.Sprintf(format, v...)))
	}
}
