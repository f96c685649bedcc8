package inboxsql

import (
	"fmt"
	"time"
)

// mysqlTime is the layout of a DATETIME(6) value.
const mysqlTime = "2006-01-02 15:04:05.000000"

// timeArg converts t to the dialect's column: a timestamptz (Postgres),
// Unix microseconds in an INTEGER (SQLite), or a DATETIME(6) in UTC
// (MySQL), sent as text so that the connection's time zone settings (the
// DSN's loc, the session's time_zone) cannot shift it.
func (d *Driver) timeArg(t time.Time) any {
	switch d.dialect {
	case Postgres:
		return t
	case SQLite:
		return t.UnixMicro()
	default:
		return t.UTC().Format(mysqlTime)
	}
}

// timeScanner returns a scanner that reads a time column of the dialect
// into *t, in UTC.
func (d *Driver) timeScanner(t *time.Time) timeScanner {
	return timeScanner{t: t, wallClock: d.dialect.mysql()}
}

// nullTimeScanner is timeScanner for a nullable column: NULL reads as the
// zero time.
func (d *Driver) nullTimeScanner(t *time.Time) timeScanner {
	return timeScanner{t: t, wallClock: d.dialect.mysql(), nullable: true}
}

// timeScanner reads a time column into *t, in UTC.
type timeScanner struct {
	t *time.Time
	// wallClock reads a time.Time by its wall clock, as a DATETIME that
	// the DSN's parseTime=true placed in the DSN's loc: the stored value
	// is UTC whatever that loc is.
	wallClock bool
	// nullable reads NULL as the zero time.
	nullable bool
}

func (s timeScanner) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		if !s.nullable {
			return fmt.Errorf("inboxsql: cannot read NULL as a time")
		}
		*s.t = time.Time{}
	case time.Time:
		if s.wallClock {
			v = time.Date(v.Year(), v.Month(), v.Day(), v.Hour(), v.Minute(), v.Second(), v.Nanosecond(), time.UTC)
		}
		*s.t = v.UTC()
	case int64:
		*s.t = time.UnixMicro(v).UTC()
	case []byte:
		return s.parse(string(v))
	case string:
		return s.parse(v)
	default:
		return fmt.Errorf("inboxsql: cannot read %T as a time", src)
	}
	return nil
}

func (s timeScanner) parse(v string) error {
	t, err := time.ParseInLocation("2006-01-02 15:04:05.999999", v, time.UTC)
	if err != nil {
		return fmt.Errorf("inboxsql: read time: %w", err)
	}
	*s.t = t
	return nil
}
