package require

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

var (
	_ TestingT = (*testing.T)(nil)
	_ TestingT = (*testing.B)(nil)
)

// fakeT records the calls an assertion makes instead of stopping the test.
type fakeT struct {
	calls  []string // "Helper", "Errorf", "FailNow", in order
	errors []string
}

func (f *fakeT) Helper() { f.calls = append(f.calls, "Helper") }

func (f *fakeT) Errorf(format string, args ...any) {
	f.calls = append(f.calls, "Errorf")
	f.errors = append(f.errors, fmt.Sprintf(format, args...))
}

func (f *fakeT) FailNow() { f.calls = append(f.calls, "FailNow") }

func (f *fakeT) failed() bool { return len(f.errors) > 0 }

// check runs assert against a fakeT and requires it to pass, or to fail
// once with a message starting with name and containing every one of want.
func check(t *testing.T, name string, wantFail bool, assert func(TestingT), want ...string) {
	t.Helper()
	f := &fakeT{}
	assert(f)
	if !wantFail {
		if f.failed() || len(f.calls) > 0 && f.calls[len(f.calls)-1] == "FailNow" {
			t.Fatalf("%s failed, want a pass: %q", name, f.errors)
		}
		return
	}
	if len(f.errors) != 1 {
		t.Fatalf("%s reported %d failures, want 1: %q", name, len(f.errors), f.errors)
	}
	if len(f.calls) < 3 || f.calls[0] != "Helper" || f.calls[len(f.calls)-2] != "Errorf" || f.calls[len(f.calls)-1] != "FailNow" {
		t.Fatalf("%s made the calls %v, want Helper first and Errorf, FailNow last", name, f.calls)
	}
	msg := f.errors[0]
	if !strings.HasPrefix(msg, name+":") {
		t.Fatalf("%s failed with %q, which does not name the assertion", name, msg)
	}
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Fatalf("%s failed with %q, want it to contain %q", name, msg, w)
		}
	}
}

type myErr struct{ code int }

func (e *myErr) Error() string { return fmt.Sprintf("code %d", e.code) }

type name string

func TestEqual(t *testing.T) {
	t.Parallel()
	check(t, "Equal", false, func(t TestingT) { Equal(t, 1, 1) })
	check(t, "Equal", false, func(t TestingT) { Equal(t, []int{1, 2}, []int{1, 2}) })
	check(t, "Equal", false, func(t TestingT) { Equal(t, []byte("ab"), []byte("ab")) })
	check(t, "Equal", false, func(t TestingT) { Equal(t, nil, nil) })
	check(t, "Equal", false, func(t TestingT) { Equal(t, map[string]int{"a": 1}, map[string]int{"a": 1}) })
	check(t, "Equal", true, func(t TestingT) { Equal(t, "a", "b") }, `expected: "a"`, `actual:   "b"`)
	check(t, "Equal", true, func(t TestingT) { Equal(t, 1, int64(1)) }, "int(1)", "int64(1)")
	check(t, "Equal", true, func(t TestingT) { Equal(t, []byte{}, []byte(nil)) })
	check(t, "Equal", true, func(t TestingT) { Equal(t, nil, (*int)(nil)) })
	check(t, "Equal", true, func(t TestingT) { Equal(t, func() {}, func() {}) }, "functions")
}

func TestNotEqual(t *testing.T) {
	t.Parallel()
	check(t, "NotEqual", false, func(t TestingT) { NotEqual(t, 1, 2) })
	check(t, "NotEqual", false, func(t TestingT) { NotEqual(t, 1, int64(1)) })
	check(t, "NotEqual", true, func(t TestingT) { NotEqual(t, "x", "x") }, `"x"`)
}

func TestEqualValues(t *testing.T) {
	t.Parallel()
	check(t, "EqualValues", false, func(t TestingT) { EqualValues(t, 1, int64(1)) })
	check(t, "EqualValues", false, func(t TestingT) { EqualValues(t, uint64(7), 7) })
	check(t, "EqualValues", false, func(t TestingT) { EqualValues(t, int32(3), 3.0) })
	check(t, "EqualValues", false, func(t TestingT) { EqualValues(t, name("x"), "x") })
	check(t, "EqualValues", false, func(t TestingT) { EqualValues(t, "ab", []byte("ab")) })
	check(t, "EqualValues", true, func(t TestingT) { EqualValues(t, 1, int64(2)) }, "int(1)", "int64(2)")
	check(t, "EqualValues", true, func(t TestingT) { EqualValues(t, -1, uint64(18446744073709551615)) })
	check(t, "EqualValues", true, func(t TestingT) { EqualValues(t, 97, "a") })
	check(t, "EqualValues", true, func(t TestingT) { EqualValues(t, 1, nil) })
}

func TestTrueFalse(t *testing.T) {
	t.Parallel()
	check(t, "True", false, func(t TestingT) { True(t, true) })
	check(t, "True", true, func(t TestingT) { True(t, false) })
	check(t, "False", false, func(t TestingT) { False(t, false) })
	check(t, "False", true, func(t TestingT) { False(t, true) })
}

func TestNil(t *testing.T) {
	t.Parallel()
	check(t, "Nil", false, func(t TestingT) { Nil(t, nil) })
	check(t, "Nil", false, func(t TestingT) { Nil(t, (*int)(nil)) })
	check(t, "Nil", false, func(t TestingT) { Nil(t, []int(nil)) })
	check(t, "Nil", false, func(t TestingT) { Nil(t, map[int]int(nil)) })
	check(t, "Nil", true, func(t TestingT) { Nil(t, 0) }, "int(0)")
	check(t, "Nil", true, func(t TestingT) { Nil(t, []int{}) })
	check(t, "NotNil", false, func(t TestingT) { NotNil(t, new(int)) })
	check(t, "NotNil", false, func(t TestingT) { NotNil(t, 0) })
	check(t, "NotNil", true, func(t TestingT) { NotNil(t, nil) })
	check(t, "NotNil", true, func(t TestingT) { NotNil(t, (func())(nil)) })
}

func TestZero(t *testing.T) {
	t.Parallel()
	check(t, "Zero", false, func(t TestingT) { Zero(t, 0) })
	check(t, "Zero", false, func(t TestingT) { Zero(t, "") })
	check(t, "Zero", false, func(t TestingT) { Zero(t, nil) })
	check(t, "Zero", false, func(t TestingT) { Zero(t, struct{ a int }{}) })
	check(t, "Zero", false, func(t TestingT) { Zero(t, time.Duration(0)) })
	check(t, "Zero", true, func(t TestingT) { Zero(t, 3) }, "int(3)")
	check(t, "Zero", true, func(t TestingT) { Zero(t, []int{}) })
	check(t, "NotZero", false, func(t TestingT) { NotZero(t, 3) })
	check(t, "NotZero", false, func(t TestingT) { NotZero(t, []int{}) })
	check(t, "NotZero", true, func(t TestingT) { NotZero(t, int64(0)) }, "int64(0)")
	check(t, "NotZero", true, func(t TestingT) { NotZero(t, nil) })
}

func TestEmpty(t *testing.T) {
	t.Parallel()
	empty := []any{nil, "", 0, false, []int{}, []int(nil), map[int]int{}, make(chan int),
		(*int)(nil), new(int), new([]int), [2]int{}, struct{}{}, time.Time{}}
	for _, v := range empty {
		check(t, "Empty", false, func(t TestingT) { Empty(t, v) })
		check(t, "NotEmpty", true, func(t TestingT) { NotEmpty(t, v) })
	}
	full := []any{"a", 1, true, []int{0}, map[int]int{0: 0}, [2]int{0, 1}, &[]int{1}, errors.New("x"), time.Now()}
	for _, v := range full {
		check(t, "Empty", true, func(t TestingT) { Empty(t, v) })
		check(t, "NotEmpty", false, func(t TestingT) { NotEmpty(t, v) })
	}
}

func TestLen(t *testing.T) {
	t.Parallel()
	ch := make(chan int, 3)
	ch <- 1
	check(t, "Len", false, func(t TestingT) { Len(t, "abc", 3) })
	check(t, "Len", false, func(t TestingT) { Len(t, []int{1, 2}, 2) })
	check(t, "Len", false, func(t TestingT) { Len(t, map[int]bool{1: true}, 1) })
	check(t, "Len", false, func(t TestingT) { Len(t, [4]int{}, 4) })
	check(t, "Len", false, func(t TestingT) { Len(t, &[4]int{}, 4) })
	check(t, "Len", false, func(t TestingT) { Len(t, ch, 1) })
	check(t, "Len", false, func(t TestingT) { Len(t, []int(nil), 0) })
	check(t, "Len", true, func(t TestingT) { Len(t, []int{1}, 2) }, "expected 2, got 1")
	check(t, "Len", true, func(t TestingT) { Len(t, 5, 1) }, "has no length")
}

func TestContains(t *testing.T) {
	t.Parallel()
	check(t, "Contains", false, func(t TestingT) { Contains(t, "hello", "ell") })
	check(t, "Contains", false, func(t TestingT) { Contains(t, name("hello"), name("lo")) })
	check(t, "Contains", false, func(t TestingT) { Contains(t, []string{"a", "b"}, "b") })
	check(t, "Contains", false, func(t TestingT) { Contains(t, [2]int{1, 2}, 2) })
	check(t, "Contains", false, func(t TestingT) { Contains(t, map[string]int{"k": 0}, "k") })
	check(t, "Contains", false, func(t TestingT) { Contains(t, [][]byte{[]byte("x")}, []byte("x")) })
	check(t, "Contains", true, func(t TestingT) { Contains(t, "hello", "xyz") }, `"hello" does not contain "xyz"`)
	check(t, "Contains", true, func(t TestingT) { Contains(t, []int{1}, int64(1)) })
	check(t, "Contains", true, func(t TestingT) { Contains(t, map[string]int{"k": 0}, 0) })
	check(t, "Contains", true, func(t TestingT) { Contains(t, 12, 1) }, "cannot look")
	check(t, "NotContains", false, func(t TestingT) { NotContains(t, "hello", "xyz") })
	check(t, "NotContains", false, func(t TestingT) { NotContains(t, []int{1}, 2) })
	check(t, "NotContains", true, func(t TestingT) { NotContains(t, "hello", "ell") }, `"hello" contains "ell"`)
	check(t, "NotContains", true, func(t TestingT) { NotContains(t, map[int]int{1: 2}, 1) })
	check(t, "NotContains", true, func(t TestingT) { NotContains(t, nil, 1) }, "cannot look")
}

func TestErrors(t *testing.T) {
	t.Parallel()
	base := errors.New("base")
	wrapped := fmt.Errorf("wrapped: %w", base)
	var typedNil *myErr

	check(t, "NoError", false, func(t TestingT) { NoError(t, nil) })
	check(t, "NoError", true, func(t TestingT) { NoError(t, base) }, `"base"`)
	check(t, "NoError", true, func(t TestingT) { NoError(t, typedNil) }, "*require.myErr")

	check(t, "Error", false, func(t TestingT) { Error(t, base) })
	check(t, "Error", true, func(t TestingT) { Error(t, nil) })

	check(t, "ErrorIs", false, func(t TestingT) { ErrorIs(t, wrapped, base) })
	check(t, "ErrorIs", false, func(t TestingT) { ErrorIs(t, nil, nil) })
	check(t, "ErrorIs", true, func(t TestingT) { ErrorIs(t, wrapped, fs.ErrNotExist) }, "wrapped: base")
	check(t, "ErrorIs", true, func(t TestingT) { ErrorIs(t, nil, base) })

	check(t, "NotErrorIs", false, func(t TestingT) { NotErrorIs(t, wrapped, fs.ErrNotExist) })
	check(t, "NotErrorIs", false, func(t TestingT) { NotErrorIs(t, nil, base) })
	check(t, "NotErrorIs", true, func(t TestingT) { NotErrorIs(t, wrapped, base) })

	check(t, "ErrorContains", false, func(t TestingT) { ErrorContains(t, wrapped, "ped: ba") })
	check(t, "ErrorContains", true, func(t TestingT) { ErrorContains(t, wrapped, "nope") }, `"wrapped: base" does not contain "nope"`)
	check(t, "ErrorContains", true, func(t TestingT) { ErrorContains(t, nil, "x") }, "got nil")
}

func TestErrorAs(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("outer: %w", &myErr{code: 7})
	var target *myErr
	check(t, "ErrorAs", false, func(t TestingT) { ErrorAs(t, err, &target) })
	if target == nil || target.code != 7 {
		t.Fatalf("ErrorAs did not set the target: %v", target)
	}
	var pathErr *fs.PathError
	_, openErr := os.Open("/no/such/file/anywhere")
	check(t, "ErrorAs", false, func(t TestingT) { ErrorAs(t, openErr, &pathErr) })
	var iface interface{ Timeout() bool }
	check(t, "ErrorAs", true, func(t TestingT) { ErrorAs(t, err, &iface) }, "Timeout")
	check(t, "ErrorAs", true, func(t TestingT) { ErrorAs(t, err, &pathErr) }, "*fs.PathError")
	check(t, "ErrorAs", true, func(t TestingT) { ErrorAs(t, nil, &pathErr) })
	check(t, "ErrorAs", true, func(t TestingT) { ErrorAs(t, err, target) }, "not a non-nil pointer")
	check(t, "ErrorAs", true, func(t TestingT) { ErrorAs(t, err, new(int)) }, "not a non-nil pointer")
}

func TestRegexp(t *testing.T) {
	t.Parallel()
	check(t, "Regexp", false, func(t TestingT) { Regexp(t, `b\s+4`, "billing   b  4  ") })
	check(t, "Regexp", false, func(t TestingT) { Regexp(t, regexp.MustCompile(`^\d+$`), 1234) })
	check(t, "Regexp", false, func(t TestingT) { Regexp(t, `(?m)^two$`, "one\ntwo\nthree") })
	check(t, "Regexp", false, func(t TestingT) { Regexp(t, `^hi$`, []byte("hi")) })
	check(t, "Regexp", true, func(t TestingT) { Regexp(t, `^x`, "abc") }, `"abc" does not match "^x"`)
	check(t, "Regexp", true, func(t TestingT) { Regexp(t, `(`, "abc") }, "bad pattern")
}

func TestSame(t *testing.T) {
	t.Parallel()
	a, b := new(int), new(int)
	check(t, "Same", false, func(t TestingT) { Same(t, a, a) })
	check(t, "Same", true, func(t TestingT) { Same(t, a, b) }, "not the same pointer")
	check(t, "Same", true, func(t TestingT) { Same(t, 1, 1) }, "must be pointers")
	check(t, "Same", true, func(t TestingT) { Same(t, a, (*int64)(nil)) })
}

func TestOrdered(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(100, 0)
	for _, c := range []struct {
		small, big any
	}{
		{1, 2},
		{int32(-5), int32(3)},
		{uint64(1), uint64(1 << 63)},
		{1.5, 2.5},
		{float32(-1), float32(0)},
		{"a", "b"},
		{name("a"), name("b")},
		{time.Millisecond, time.Second},
		{t0, t0.Add(time.Nanosecond)},
		{[]byte("a"), []byte("b")},
		{time.Duration(5), int64(6)}, // one kind, as testify requires
	} {
		check(t, "Less", false, func(t TestingT) { Less(t, c.small, c.big) })
		check(t, "LessOrEqual", false, func(t TestingT) { LessOrEqual(t, c.small, c.big) })
		check(t, "LessOrEqual", false, func(t TestingT) { LessOrEqual(t, c.small, c.small) })
		check(t, "Greater", false, func(t TestingT) { Greater(t, c.big, c.small) })
		check(t, "GreaterOrEqual", false, func(t TestingT) { GreaterOrEqual(t, c.big, c.small) })
		check(t, "GreaterOrEqual", false, func(t TestingT) { GreaterOrEqual(t, c.big, c.big) })

		check(t, "Less", true, func(t TestingT) { Less(t, c.big, c.small) }, "<")
		check(t, "Less", true, func(t TestingT) { Less(t, c.small, c.small) })
		check(t, "LessOrEqual", true, func(t TestingT) { LessOrEqual(t, c.big, c.small) }, "<=")
		check(t, "Greater", true, func(t TestingT) { Greater(t, c.small, c.big) }, ">")
		check(t, "Greater", true, func(t TestingT) { Greater(t, c.big, c.big) })
		check(t, "GreaterOrEqual", true, func(t TestingT) { GreaterOrEqual(t, c.small, c.big) }, ">=")
	}
	check(t, "Less", true, func(t TestingT) { Less(t, 1, int64(2)) }, "not of one kind")
	check(t, "Greater", true, func(t TestingT) { Greater(t, 2, 1.0) }, "not of one kind")
	check(t, "GreaterOrEqual", true, func(t TestingT) { GreaterOrEqual(t, nil, nil) }, "not of one kind")
	check(t, "LessOrEqual", true, func(t TestingT) { LessOrEqual(t, true, true) }, "cannot order")
	check(t, "Less", true, func(t TestingT) { Less(t, []int{1}, []int{2}) }, "cannot order")
}

func TestPositive(t *testing.T) {
	t.Parallel()
	for _, v := range []any{1, int8(1), uint(1), 0.5, float32(1e-9), time.Nanosecond} {
		check(t, "Positive", false, func(t TestingT) { Positive(t, v) })
	}
	for _, v := range []any{0, -1, int64(-7), uint32(0), 0.0, -0.5, -time.Second} {
		check(t, "Positive", true, func(t TestingT) { Positive(t, v) }, ">")
	}
	check(t, "Positive", true, func(t TestingT) { Positive(t, nil) }, "nil")
	check(t, "Positive", true, func(t TestingT) { Positive(t, true) }, "cannot order")
}

func TestMessage(t *testing.T) {
	t.Parallel()
	check(t, "True", true, func(t TestingT) { True(t, false, "plain") }, "\n\tmessage:  plain")
	check(t, "True", true, func(t TestingT) { True(t, false, "n=%d s=%s", 3, "x") }, "message:  n=3 s=x")
	check(t, "True", true, func(t TestingT) { True(t, false, 42) }, "message:  42")
	check(t, "True", true, func(t TestingT) { True(t, false, "100%") }, "message:  100%")

	f := &fakeT{}
	True(f, false)
	if f.errors[0] != "True: the value is false" {
		t.Fatalf("a failure without a message printed %q", f.errors[0])
	}
}

func TestElementsMatch(t *testing.T) {
	check(t, "ElementsMatch", false, func(f TestingT) { ElementsMatch(f, []string{"a", "b", "a"}, []string{"a", "a", "b"}) })
	check(t, "ElementsMatch", false, func(f TestingT) { ElementsMatch(f, []int{}, [0]int{}) })
	check(t, "ElementsMatch", true, func(f TestingT) { ElementsMatch(f, []string{"a", "b"}, []string{"a", "a"}) }, "[b]", "[a]")
	check(t, "ElementsMatch", true, func(f TestingT) { ElementsMatch(f, []int{1}, []int{1, 2}) }, "[2]")
	check(t, "ElementsMatch", true, func(f TestingT) { ElementsMatch(f, "ab", []string{"a"}) }, "not both lists")
}
