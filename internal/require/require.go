// Package require is a small stand-in for the assertions the project's
// tests use, so that no library module needs a test-only dependency: a
// user's module graph gains nothing from the project's tests.
//
// Each function checks one thing and, when it does not hold, reports the
// failure and stops the test (FailNow), with the optional message: either
// one value, or a format string and its arguments.
package require

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"time"
)

// TestingT is the part of testing.TB the assertions use.
type TestingT interface {
	Helper()
	Errorf(format string, args ...any)
	FailNow()
}

func fail(t TestingT, what string, msgAndArgs []any) {
	t.Helper()
	if msg := message(msgAndArgs); msg != "" {
		what += "\n\tmessage: " + msg
	}
	t.Errorf("%s", what)
	t.FailNow()
}

func message(msgAndArgs []any) string {
	switch len(msgAndArgs) {
	case 0:
		return ""
	case 1:
		if s, ok := msgAndArgs[0].(string); ok {
			return s
		}
		return fmt.Sprintf("%+v", msgAndArgs[0])
	}
	if format, ok := msgAndArgs[0].(string); ok {
		return fmt.Sprintf(format, msgAndArgs[1:]...)
	}
	return fmt.Sprint(msgAndArgs...)
}

// show formats a value for a failure message, with its type.
func show(v any) string {
	switch v := v.(type) {
	case nil:
		return "nil"
	case string:
		return fmt.Sprintf("%q", v)
	case []byte:
		return fmt.Sprintf("[]byte(%q)", v)
	case error:
		return fmt.Sprintf("%T(%q)", v, v.Error())
	}
	return fmt.Sprintf("%T(%+v)", v, v)
}

// equal reports whether two values are the same: byte slices by content,
// everything else by reflect.DeepEqual.
func equal(expected, actual any) bool {
	if expected == nil || actual == nil {
		return expected == actual
	}
	if e, ok := expected.([]byte); ok {
		a, ok := actual.([]byte)
		if !ok {
			return false
		}
		if e == nil || a == nil {
			return e == nil && a == nil
		}
		return bytes.Equal(e, a)
	}
	return reflect.DeepEqual(expected, actual)
}

// Equal requires expected and actual to be equal (reflect.DeepEqual, byte
// slices by content).
func Equal(t TestingT, expected, actual any, msgAndArgs ...any) {
	t.Helper()
	if !equal(expected, actual) {
		fail(t, fmt.Sprintf("Equal:\n\texpected: %s\n\tactual:   %s", show(expected), show(actual)), msgAndArgs)
	}
}

// NotEqual requires expected and actual to differ.
func NotEqual(t TestingT, expected, actual any, msgAndArgs ...any) {
	t.Helper()
	if equal(expected, actual) {
		fail(t, fmt.Sprintf("NotEqual: both are %s", show(actual)), msgAndArgs)
	}
}

// EqualValues requires expected and actual to be equal, or equal once
// actual is converted to expected's type (an int and an int64, say).
func EqualValues(t TestingT, expected, actual any, msgAndArgs ...any) {
	t.Helper()
	if !equalValues(expected, actual) {
		fail(t, fmt.Sprintf("EqualValues:\n\texpected: %s\n\tactual:   %s", show(expected), show(actual)), msgAndArgs)
	}
}

func equalValues(expected, actual any) bool {
	if equal(expected, actual) {
		return true
	}
	if expected == nil || actual == nil {
		return false
	}
	e, a := reflect.ValueOf(expected), reflect.ValueOf(actual)
	if isNumber(e.Kind()) && isNumber(a.Kind()) {
		return compareNumbers(e, a) == 0
	}
	if !a.Type().ConvertibleTo(e.Type()) {
		return false
	}
	return reflect.DeepEqual(a.Convert(e.Type()).Interface(), expected)
}

// True requires value to be true.
func True(t TestingT, value bool, msgAndArgs ...any) {
	t.Helper()
	if !value {
		fail(t, "True: the value is false", msgAndArgs)
	}
}

// False requires value to be false.
func False(t TestingT, value bool, msgAndArgs ...any) {
	t.Helper()
	if value {
		fail(t, "False: the value is true", msgAndArgs)
	}
}

// isNil reports whether v is nil or a nil pointer, map, slice, channel,
// function or interface.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Chan, reflect.Func, reflect.Interface, reflect.UnsafePointer:
		return rv.IsNil()
	}
	return false
}

// Nil requires object to be nil.
func Nil(t TestingT, object any, msgAndArgs ...any) {
	t.Helper()
	if !isNil(object) {
		fail(t, "Nil: got "+show(object), msgAndArgs)
	}
}

// NotNil requires object not to be nil.
func NotNil(t TestingT, object any, msgAndArgs ...any) {
	t.Helper()
	if isNil(object) {
		fail(t, "NotNil: got nil", msgAndArgs)
	}
}

// isZero reports whether v is nil or its type's zero value.
func isZero(v any) bool {
	return v == nil || reflect.ValueOf(v).IsZero()
}

// Zero requires i to be the zero value of its type.
func Zero(t TestingT, i any, msgAndArgs ...any) {
	t.Helper()
	if !isZero(i) {
		fail(t, "Zero: got "+show(i), msgAndArgs)
	}
}

// NotZero requires i not to be the zero value of its type.
func NotZero(t TestingT, i any, msgAndArgs ...any) {
	t.Helper()
	if isZero(i) {
		fail(t, "NotZero: got the zero value "+show(i), msgAndArgs)
	}
}

// isEmpty reports whether object is nil, a zero value, a container of
// length 0, or a pointer to an empty value.
func isEmpty(object any) bool {
	if object == nil {
		return true
	}
	v := reflect.ValueOf(object)
	switch v.Kind() {
	case reflect.Array, reflect.Chan, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Pointer:
		if v.IsNil() {
			return true
		}
		return isEmpty(v.Elem().Interface())
	}
	return v.IsZero()
}

// Empty requires object to be empty: nil, a zero value, or of length 0.
func Empty(t TestingT, object any, msgAndArgs ...any) {
	t.Helper()
	if !isEmpty(object) {
		fail(t, "Empty: got "+show(object), msgAndArgs)
	}
}

// NotEmpty requires object not to be empty.
func NotEmpty(t TestingT, object any, msgAndArgs ...any) {
	t.Helper()
	if isEmpty(object) {
		fail(t, "NotEmpty: got "+show(object), msgAndArgs)
	}
}

// Len requires object (a string, slice, array, map or channel) to have
// length n.
func Len(t TestingT, object any, n int, msgAndArgs ...any) {
	t.Helper()
	v := reflect.ValueOf(object)
	switch v.Kind() {
	case reflect.Array, reflect.Chan, reflect.Map, reflect.Slice, reflect.String:
		if v.Len() != n {
			fail(t, fmt.Sprintf("Len: want %d, got %d: %s", n, v.Len(), show(object)), msgAndArgs)
		}
	default:
		fail(t, fmt.Sprintf("Len: %s has no length", show(object)), msgAndArgs)
	}
}

// contains reports whether s contains element: a substring of a string, an
// element of a slice or array, a key of a map. ok is false when s is none
// of those.
func contains(s, element any) (found, ok bool) {
	v := reflect.ValueOf(s)
	switch v.Kind() {
	case reflect.String:
		e, isString := element.(string)
		if !isString {
			return false, false
		}
		return strings.Contains(v.String(), e), true
	case reflect.Slice, reflect.Array:
		for i := 0; i < v.Len(); i++ {
			if equal(v.Index(i).Interface(), element) {
				return true, true
			}
		}
		return false, true
	case reflect.Map:
		for _, k := range v.MapKeys() {
			if equal(k.Interface(), element) {
				return true, true
			}
		}
		return false, true
	}
	return false, false
}

// Contains requires s (a string, slice, array or map) to contain element
// (a substring, an element, a key).
func Contains(t TestingT, s, element any, msgAndArgs ...any) {
	t.Helper()
	found, ok := contains(s, element)
	switch {
	case !ok:
		fail(t, fmt.Sprintf("Contains: cannot look for %s in %s", show(element), show(s)), msgAndArgs)
	case !found:
		fail(t, fmt.Sprintf("Contains: %s does not contain %s", show(s), show(element)), msgAndArgs)
	}
}

// NotContains requires s (a string, slice, array or map) not to contain
// element.
func NotContains(t TestingT, s, element any, msgAndArgs ...any) {
	t.Helper()
	found, ok := contains(s, element)
	switch {
	case !ok:
		fail(t, fmt.Sprintf("NotContains: cannot look for %s in %s", show(element), show(s)), msgAndArgs)
	case found:
		fail(t, fmt.Sprintf("NotContains: %s contains %s", show(s), show(element)), msgAndArgs)
	}
}

// NoError requires err to be nil.
func NoError(t TestingT, err error, msgAndArgs ...any) {
	t.Helper()
	if err != nil {
		fail(t, fmt.Sprintf("NoError: got %s", show(err)), msgAndArgs)
	}
}

// Error requires err not to be nil.
func Error(t TestingT, err error, msgAndArgs ...any) {
	t.Helper()
	if err == nil {
		fail(t, "Error: got no error", msgAndArgs)
	}
}

// ErrorIs requires errors.Is(err, target).
func ErrorIs(t TestingT, err, target error, msgAndArgs ...any) {
	t.Helper()
	if !errors.Is(err, target) {
		fail(t, fmt.Sprintf("ErrorIs: %s is not %s", show(err), show(target)), msgAndArgs)
	}
}

// NotErrorIs requires !errors.Is(err, target).
func NotErrorIs(t TestingT, err, target error, msgAndArgs ...any) {
	t.Helper()
	if errors.Is(err, target) {
		fail(t, fmt.Sprintf("NotErrorIs: %s is %s", show(err), show(target)), msgAndArgs)
	}
}

// ErrorAs requires errors.As(err, target).
func ErrorAs(t TestingT, err error, target any, msgAndArgs ...any) {
	t.Helper()
	if !errors.As(err, target) {
		fail(t, fmt.Sprintf("ErrorAs: no error in the chain of %s is a %T", show(err), target), msgAndArgs)
	}
}

// ErrorContains requires err not to be nil, and its text to contain
// contains.
func ErrorContains(t TestingT, err error, contains string, msgAndArgs ...any) {
	t.Helper()
	switch {
	case err == nil:
		fail(t, fmt.Sprintf("ErrorContains: got no error, want one containing %q", contains), msgAndArgs)
	case !strings.Contains(err.Error(), contains):
		fail(t, fmt.Sprintf("ErrorContains: %q does not contain %q", err.Error(), contains), msgAndArgs)
	}
}

// Regexp requires the text of str (fmt.Sprint) to match rx, a
// *regexp.Regexp or a pattern.
func Regexp(t TestingT, rx any, str any, msgAndArgs ...any) {
	t.Helper()
	var re *regexp.Regexp
	switch rx := rx.(type) {
	case *regexp.Regexp:
		re = rx
	case string:
		var err error
		if re, err = regexp.Compile(rx); err != nil {
			fail(t, fmt.Sprintf("Regexp: bad pattern %q: %v", rx, err), msgAndArgs)
			return
		}
	default:
		fail(t, fmt.Sprintf("Regexp: %s is not a pattern", show(rx)), msgAndArgs)
		return
	}
	if s := fmt.Sprint(str); !re.MatchString(s) {
		fail(t, fmt.Sprintf("Regexp: %q does not match %q", s, re.String()), msgAndArgs)
	}
}

// Same requires expected and actual to be pointers of one type to the
// same value.
func Same(t TestingT, expected, actual any, msgAndArgs ...any) {
	t.Helper()
	e, a := reflect.ValueOf(expected), reflect.ValueOf(actual)
	if e.Kind() != reflect.Pointer || a.Kind() != reflect.Pointer || e.Type() != a.Type() || e.Pointer() != a.Pointer() {
		fail(t, fmt.Sprintf("Same: %s and %s are not the same pointer", show(expected), show(actual)), msgAndArgs)
	}
}

func isNumber(k reflect.Kind) bool {
	switch k {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64:
		return true
	}
	return false
}

// compareNumbers compares two numbers of any kinds: -1, 0 or +1.
func compareNumbers(a, b reflect.Value) int {
	switch {
	case a.CanInt() && b.CanInt():
		return cmp3(a.Int() < b.Int(), a.Int() > b.Int())
	case a.CanUint() && b.CanUint():
		return cmp3(a.Uint() < b.Uint(), a.Uint() > b.Uint())
	case a.CanInt() && b.CanUint():
		if a.Int() < 0 {
			return -1
		}
		return cmp3(uint64(a.Int()) < b.Uint(), uint64(a.Int()) > b.Uint())
	case a.CanUint() && b.CanInt():
		return -compareNumbers(b, a)
	}
	x, y := toFloat(a), toFloat(b)
	return cmp3(x < y, x > y)
}

func toFloat(v reflect.Value) float64 {
	switch {
	case v.CanInt():
		return float64(v.Int())
	case v.CanUint():
		return float64(v.Uint())
	}
	return v.Float()
}

func cmp3(less, more bool) int {
	switch {
	case less:
		return -1
	case more:
		return 1
	}
	return 0
}

// compare orders two values of one kind: numbers, strings and times. ok is
// false when they cannot be ordered.
func compare(a, b any) (c int, ok bool) {
	if ta, isTime := a.(time.Time); isTime {
		tb, isTime := b.(time.Time)
		if !isTime {
			return 0, false
		}
		return ta.Compare(tb), true
	}
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	if !va.IsValid() || !vb.IsValid() || va.Type() != vb.Type() {
		return 0, false
	}
	switch {
	case isNumber(va.Kind()):
		return compareNumbers(va, vb), true
	case va.Kind() == reflect.String:
		return strings.Compare(va.String(), vb.String()), true
	}
	return 0, false
}

func ordered(t TestingT, name string, a, b any, want func(int) bool, rel string, msgAndArgs []any) {
	t.Helper()
	c, ok := compare(a, b)
	switch {
	case !ok:
		fail(t, fmt.Sprintf("%s: cannot order %s and %s", name, show(a), show(b)), msgAndArgs)
	case !want(c):
		fail(t, fmt.Sprintf("%s: want %s %s %s", name, show(a), rel, show(b)), msgAndArgs)
	}
}

// Greater requires e1 > e2; both of one ordered type.
func Greater(t TestingT, e1, e2 any, msgAndArgs ...any) {
	t.Helper()
	ordered(t, "Greater", e1, e2, func(c int) bool { return c > 0 }, ">", msgAndArgs)
}

// GreaterOrEqual requires e1 >= e2; both of one ordered type.
func GreaterOrEqual(t TestingT, e1, e2 any, msgAndArgs ...any) {
	t.Helper()
	ordered(t, "GreaterOrEqual", e1, e2, func(c int) bool { return c >= 0 }, ">=", msgAndArgs)
}

// Less requires e1 < e2; both of one ordered type.
func Less(t TestingT, e1, e2 any, msgAndArgs ...any) {
	t.Helper()
	ordered(t, "Less", e1, e2, func(c int) bool { return c < 0 }, "<", msgAndArgs)
}

// LessOrEqual requires e1 <= e2; both of one ordered type.
func LessOrEqual(t TestingT, e1, e2 any, msgAndArgs ...any) {
	t.Helper()
	ordered(t, "LessOrEqual", e1, e2, func(c int) bool { return c <= 0 }, "<=", msgAndArgs)
}

// Positive requires e > 0, a number.
func Positive(t TestingT, e any, msgAndArgs ...any) {
	t.Helper()
	v := reflect.ValueOf(e)
	if !v.IsValid() || !isNumber(v.Kind()) {
		fail(t, fmt.Sprintf("Positive: %s is not a number", show(e)), msgAndArgs)
		return
	}
	if compareNumbers(v, reflect.ValueOf(0)) <= 0 {
		fail(t, fmt.Sprintf("Positive: got %s", show(e)), msgAndArgs)
	}
}
