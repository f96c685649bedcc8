package command

import (
	"context"
	"fmt"
	"strings"
	"sync"
)

// cleanupKey is the context key of a command's cleanupLog.
type cleanupKey struct{}

// cleanupLog is what a command's cleanup removed, in the order it said so.
type cleanupLog struct {
	mu    sync.Mutex
	lines []string
}

// Cleaned records what a command's cleanup did: "dropped schema x",
// "stopped 3 consumers". When a signal ends the command, Main's line says
// it after "interrupted by SIGINT; ", so that the user knows what the run
// left behind, if anything. Packages under a command call it from their
// cleanup with the command's context (cancelled or not); without Main's
// context it does nothing. An empty what records nothing.
func Cleaned(ctx context.Context, format string, args ...any) {
	l, _ := ctx.Value(cleanupKey{}).(*cleanupLog)
	if l == nil {
		return
	}
	what := OneLine(fmt.Sprintf(format, args...))
	if what == "" {
		return
	}
	l.mu.Lock()
	l.lines = append(l.lines, what)
	l.mu.Unlock()
}

// withCleanupLog returns ctx with a log for Cleaned.
func withCleanupLog(ctx context.Context) (context.Context, *cleanupLog) {
	l := &cleanupLog{}
	return context.WithValue(ctx, cleanupKey{}, l), l
}

// String is the log on one line: "; stopped 3 consumers, dropped schema
// x", or empty when nothing was recorded.
func (l *cleanupLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lines) == 0 {
		return ""
	}
	return "; " + strings.Join(l.lines, ", ")
}
