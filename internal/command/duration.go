package command

import (
	"errors"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Duration is a flag.Value for durations that also take days: "30d",
// "1d12h", "36h".
type Duration struct {
	// Value is the duration: the default until the flag is given.
	Value time.Duration
	// Given says the flag was given on the command line.
	Given bool
}

// String implements flag.Value.
func (f *Duration) String() string {
	if !f.Given {
		return ""
	}
	return f.Value.String()
}

// Set implements flag.Value.
func (f *Duration) Set(s string) error {
	d, err := ParseDuration(s)
	if err != nil {
		return err
	}
	f.Value, f.Given = d, true
	return nil
}

// ParseDuration parses a Go duration with an optional leading number of
// days. Its errors do not repeat s: the flag package's message has it.
func ParseDuration(s string) (time.Duration, error) {
	var days int64
	if i := strings.IndexByte(s, 'd'); i > 0 {
		n, err := strconv.ParseInt(s[:i], 10, 64)
		if err != nil {
			return 0, errors.New("want a form like 30d, 12h or 1d12h")
		}
		days, s = n, s[i+1:]
	}
	var rest time.Duration
	if s != "" {
		var err error
		rest, err = time.ParseDuration(s)
		if err != nil && goDuration.MatchString(s) {
			// Well formed, so too long for a time.Duration.
			return 0, errors.New("must be positive and under 100 years")
		}
		if err != nil {
			return 0, errors.New("want a form like 30d, 12h or 1d12h")
		}
	}
	// Each part is checked before the sum, which could overflow.
	if days < 0 || rest < 0 || days > maxDays || rest > maxDuration-time.Duration(days)*24*time.Hour {
		return 0, errors.New("must be positive and under 100 years")
	}
	return time.Duration(days)*24*time.Hour + rest, nil
}

// goDuration matches the form time.ParseDuration reads.
var goDuration = regexp.MustCompile(`^[-+]?([0-9]*(\.[0-9]*)?(ns|us|µs|μs|ms|s|m|h))+$`)

// maxDays bounds a duration flag: 100 years, well inside a time.Duration
// (292 years).
const (
	maxDays     = 100 * 365
	maxDuration = maxDays * 24 * time.Hour
)
