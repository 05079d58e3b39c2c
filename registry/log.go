package registry

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/sirupsen/logrus"
)

// distribution logs through the process-wide logrus standard logger and
// offers no per-App logger. We take that logger over once: its own output is
// discarded and its formatter does nothing, and a hook forwards each entry to
// the *slog.Logger of every live Server that enables the entry's level.
// logrus's level follows the most verbose level any live Server asks for, so
// with only discarding loggers distribution builds no log entries at all.

var (
	logMu      sync.Mutex
	logSinks   = map[*logSink]struct{}{}
	logrusOnce sync.Once
)

type logSink struct{ logger *slog.Logger }

func registerLogger(l *slog.Logger) *logSink {
	logrusOnce.Do(func() {
		std := logrus.StandardLogger()
		std.SetOutput(io.Discard)
		std.SetFormatter(nopFormatter{})
		std.SetReportCaller(false)
		std.AddHook(forwardHook{})
	})
	s := &logSink{logger: l}
	logMu.Lock()
	logSinks[s] = struct{}{}
	setLogrusLevelLocked()
	logMu.Unlock()
	return s
}

func (s *logSink) unregister() {
	logMu.Lock()
	delete(logSinks, s)
	setLogrusLevelLocked()
	logMu.Unlock()
}

func setLogrusLevelLocked() {
	level := logrus.PanicLevel
	for s := range logSinks {
		for _, l := range []logrus.Level{logrus.DebugLevel, logrus.InfoLevel, logrus.WarnLevel, logrus.ErrorLevel} {
			if l > level && s.logger.Enabled(context.Background(), slogLevel(l)) {
				level = l
			}
		}
	}
	logrus.SetLevel(level)
}

func slogLevel(l logrus.Level) slog.Level {
	switch {
	case l <= logrus.ErrorLevel:
		return slog.LevelError
	case l == logrus.WarnLevel:
		return slog.LevelWarn
	case l == logrus.InfoLevel:
		return slog.LevelInfo
	default:
		return slog.LevelDebug
	}
}

type nopFormatter struct{}

func (nopFormatter) Format(*logrus.Entry) ([]byte, error) { return nil, nil }

type forwardHook struct{}

func (forwardHook) Levels() []logrus.Level { return logrus.AllLevels }

func (forwardHook) Fire(e *logrus.Entry) error {
	level := slogLevel(e.Level)
	ctx := e.Context
	if ctx == nil {
		ctx = context.Background()
	}
	logMu.Lock()
	sinks := make([]*slog.Logger, 0, len(logSinks))
	for s := range logSinks {
		sinks = append(sinks, s.logger)
	}
	logMu.Unlock()
	for _, l := range sinks {
		if !l.Enabled(ctx, level) {
			continue
		}
		attrs := make([]slog.Attr, 0, len(e.Data))
		for k, v := range e.Data {
			if k == "go.version" {
				continue
			}
			attrs = append(attrs, slog.String(k, fmt.Sprint(v)))
		}
		l.LogAttrs(ctx, level, e.Message, attrs...)
	}
	return nil
}

// quietLogs keeps distribution's logrus output off the process's stderr
// while storage is worked on outside a Server (garbage collection,
// migration, purges): they log every blob they delete. The returned
// function ends it.
func quietLogs() func() {
	return registerLogger(slog.New(slog.DiscardHandler)).unregister
}
