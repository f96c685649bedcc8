// Package require is a small stand-in for the assertions the project's
// tests use, so that no library module needs a test-only dependency.
//
// It mirrors the part of github.com/stretchr/testify/require the tests
// call, with the same names, arguments and meaning. Each function checks
// one thing; when it does not hold, it reports what it found with
// t.Errorf and stops the test with t.FailNow. Every function ends with
// msgAndArgs: nothing, one message, or a format string and its arguments,
// printed after the failure.
package require

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"strings"
	"time"
)

// TestingT is the part of testing.TB the assertions use; *testing.T and
// *testing.B satisfy it.
type TestingT interface {
	Helper()
	Errorf(format string, args ...any)
	FailNow()
}

// fail reports what, followed by the caller's message, and stops the test.
func fail(t TestingT, what string, msgAndArgs []any) {
	t.Helper()
	if msg := message(msgAndArgs); msg != "" {
		what += "\n\tmessage:  " + msg
	}
	t.Errorf("%s", what)
	t.FailNow()
}

// message renders msgAndArgs: one value as it is (a string) or with %+v,
// several as a format string and its arguments.
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

// show renders a value for a failure message with its type; strings,
// byte slices and error texts are quoted.
func show(v any) string {
	switch x := v.(type) {
	case nil:
		return "nil"
	case string:
		return fmt.Sprintf("%q", x)
	case []byte:
		if x == nil {
			return "[]byte(nil)"
		}
		return fmt.Sprintf("[]byte(%q)", x)
	case error:
		// %q calls Error() under fmt's guard, so a typed nil that panics
		// in Error() still prints.
		return fmt.Sprintf("%T(%q)", x, x)
	}
	if s, ok := stringKind(v); ok {
		return fmt.Sprintf("%T(%q)", v, s)
	}
	return fmt.Sprintf("%T(%+v)", v, v)
}

// stringKind returns v's text when v is of a string kind.
func stringKind(v any) (string, bool) {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.String {
		return "", false
	}
	return rv.String(), true
}

// objectsEqual is testify's ObjectsAreEqual: nil only equals nil, byte
// slices compare by content (a nil slice only equals a nil slice), and
// everything else by reflect.DeepEqual, which requires one type.
func objectsEqual(expected, actual any) bool {
	if expected == nil || actual == nil {
		return expected == actual
	}
	e, ok := expected.([]byte)
	if !ok {
		return reflect.DeepEqual(expected, actual)
	}
	a, ok := actual.([]byte)
	if !ok {
		return false
	}
	if e == nil || a == nil {
		return e == nil && a == nil
	}
	return bytes.Equal(e, a)
}

// funcArgs reports whether either value is a function, which Equal and
// NotEqual refuse to compare (unless both are untyped nil).
func funcArgs(expected, actual any) bool {
	if expected == nil && actual == nil {
		return false
	}
	isFunc := func(v any) bool { return v != nil && reflect.TypeOf(v).Kind() == reflect.Func }
	return isFunc(expected) || isFunc(actual)
}

// Equal requires expected and actual to be of one type and reflect.DeepEqual (byte slices by content).
func Equal(t TestingT, expected, actual any, msgAndArgs ...any) {
	t.Helper()
	switch {
	case funcArgs(expected, actual):
		fail(t, fmt.Sprintf("Equal: cannot compare functions: %s and %s", show(expected), show(actual)), msgAndArgs)
	case !objectsEqual(expected, actual):
		fail(t, fmt.Sprintf("Equal:\n\texpected: %s\n\tactual:   %s", show(expected), show(actual)), msgAndArgs)
	}
}

// NotEqual requires expected and actual not to be Equal.
func NotEqual(t TestingT, expected, actual any, msgAndArgs ...any) {
	t.Helper()
	switch {
	case funcArgs(expected, actual):
		fail(t, fmt.Sprintf("NotEqual: cannot compare functions: %s and %s", show(expected), show(actual)), msgAndArgs)
	case objectsEqual(expected, actual):
		fail(t, fmt.Sprintf("NotEqual: both are %s", show(actual)), msgAndArgs)
	}
}

// EqualValues requires expected and actual to be Equal, or equal once converted to one type (numbers by value).
func EqualValues(t TestingT, expected, actual any, msgAndArgs ...any) {
	t.Helper()
	if !equalValues(expected, actual) {
		fail(t, fmt.Sprintf("EqualValues:\n\texpected: %s\n\tactual:   %s", show(expected), show(actual)), msgAndArgs)
	}
}

func equalValues(expected, actual any) bool {
	if objectsEqual(expected, actual) {
		return true
	}
	e, a := reflect.ValueOf(expected), reflect.ValueOf(actual)
	if !e.IsValid() || !a.IsValid() {
		return false
	}
	en, an := isNumber(e.Kind()), isNumber(a.Kind())
	switch {
	case en && an:
		c, ok := compareNumbers(e, a)
		return ok && c == 0
	case en || an:
		// A number converts to a string as a rune; that is no equality.
		return false
	case !e.CanConvert(a.Type()):
		return false
	}
	return objectsEqual(e.Convert(a.Type()).Interface(), actual)
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

// isNil reports whether v is nil, or a nil pointer, map, slice, channel,
// function or interface.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Chan, reflect.Func, reflect.Interface, reflect.Map,
		reflect.Pointer, reflect.Slice, reflect.UnsafePointer:
		return rv.IsNil()
	}
	return false
}

// Nil requires object to be nil or a nil pointer, map, slice, channel or function.
func Nil(t TestingT, object any, msgAndArgs ...any) {
	t.Helper()
	if !isNil(object) {
		fail(t, "Nil: expected nil, got "+show(object), msgAndArgs)
	}
}

// NotNil requires object not to be Nil.
func NotNil(t TestingT, object any, msgAndArgs ...any) {
	t.Helper()
	if isNil(object) {
		fail(t, "NotNil: got "+show(object), msgAndArgs)
	}
}

// isZero reports whether v is nil or the zero value of its type.
func isZero(v any) bool {
	return v == nil || reflect.ValueOf(v).IsZero()
}

// Zero requires i to be nil or the zero value of its type.
func Zero(t TestingT, i any, msgAndArgs ...any) {
	t.Helper()
	if !isZero(i) {
		fail(t, "Zero: expected the zero value, got "+show(i), msgAndArgs)
	}
}

// NotZero requires i not to be Zero.
func NotZero(t TestingT, i any, msgAndArgs ...any) {
	t.Helper()
	if isZero(i) {
		fail(t, "NotZero: got the zero value "+show(i), msgAndArgs)
	}
}

// isEmpty reports whether object is nil, a slice, map or channel without
// elements, a zero value, or a pointer that is nil or points to an empty
// value.
func isEmpty(object any) bool {
	return object == nil || emptyValue(reflect.ValueOf(object))
}

func emptyValue(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Chan, reflect.Map, reflect.Slice:
		return v.Len() == 0
	case reflect.Pointer:
		return v.IsNil() || emptyValue(v.Elem())
	}
	// Strings, numbers, booleans, arrays, structs: the zero value.
	return v.IsZero()
}

// Empty requires object to be empty: nil, zero, of length 0, or a pointer to an empty value.
func Empty(t TestingT, object any, msgAndArgs ...any) {
	t.Helper()
	if !isEmpty(object) {
		fail(t, "Empty: expected empty, got "+show(object), msgAndArgs)
	}
}

// NotEmpty requires object not to be Empty.
func NotEmpty(t TestingT, object any, msgAndArgs ...any) {
	t.Helper()
	if isEmpty(object) {
		fail(t, "NotEmpty: got the empty "+show(object), msgAndArgs)
	}
}

// length returns the length of a string, slice, array, pointer to array,
// map or channel; ok is false for anything else.
func length(object any) (n int, ok bool) {
	v := reflect.ValueOf(object)
	switch v.Kind() {
	case reflect.Array, reflect.Chan, reflect.Map, reflect.Slice, reflect.String:
		return v.Len(), true
	case reflect.Pointer:
		if !v.IsNil() && v.Elem().Kind() == reflect.Array {
			return v.Len(), true
		}
	}
	return 0, false
}

// Len requires object (a string, slice, array, map or channel) to have length n.
func Len(t TestingT, object any, n int, msgAndArgs ...any) {
	t.Helper()
	got, ok := length(object)
	switch {
	case !ok:
		fail(t, fmt.Sprintf("Len: %s has no length", show(object)), msgAndArgs)
	case got != n:
		fail(t, fmt.Sprintf("Len: expected %d, got %d: %s", n, got, show(object)), msgAndArgs)
	}
}

// contains reports whether s holds element: a substring of a string, an
// element of a slice or array, a key of a map. ok is false when s is none
// of those, or s is a string and element is not.
func contains(s, element any) (found, ok bool) {
	v := reflect.ValueOf(s)
	switch v.Kind() {
	case reflect.String:
		sub, isString := stringKind(element)
		if !isString {
			return false, false
		}
		return strings.Contains(v.String(), sub), true
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			if objectsEqual(v.Index(i).Interface(), element) {
				return true, true
			}
		}
		return false, true
	case reflect.Map:
		for _, k := range v.MapKeys() {
			if objectsEqual(k.Interface(), element) {
				return true, true
			}
		}
		return false, true
	}
	return false, false
}

// Contains requires s (a string, slice, array or map) to contain element (a substring, an element, a key).
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

// NotContains requires s (a string, slice, array or map) not to contain element.
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
		fail(t, "NoError: got "+show(err), msgAndArgs)
	}
}

// Error requires err not to be nil.
func Error(t TestingT, err error, msgAndArgs ...any) {
	t.Helper()
	if err == nil {
		fail(t, "Error: expected an error, got nil", msgAndArgs)
	}
}

// ErrorIs requires errors.Is(err, target).
func ErrorIs(t TestingT, err, target error, msgAndArgs ...any) {
	t.Helper()
	if !errors.Is(err, target) {
		fail(t, fmt.Sprintf("ErrorIs: no error in the chain of %s is %s", show(err), show(target)), msgAndArgs)
	}
}

// NotErrorIs requires !errors.Is(err, target).
func NotErrorIs(t TestingT, err, target error, msgAndArgs ...any) {
	t.Helper()
	if errors.Is(err, target) {
		fail(t, fmt.Sprintf("NotErrorIs: the chain of %s holds %s", show(err), show(target)), msgAndArgs)
	}
}

var errorType = reflect.TypeFor[error]()

// ErrorAs requires errors.As(err, target), target being a non-nil pointer to an interface or an error type.
func ErrorAs(t TestingT, err error, target any, msgAndArgs ...any) {
	t.Helper()
	// errors.As panics on a bad target; report it as a failure instead.
	v := reflect.ValueOf(target)
	if v.Kind() != reflect.Pointer || v.IsNil() ||
		(v.Elem().Kind() != reflect.Interface && !v.Elem().Type().Implements(errorType)) {
		fail(t, fmt.Sprintf("ErrorAs: the target %s is not a non-nil pointer to an interface or an error type", show(target)), msgAndArgs)
		return
	}
	if !errors.As(err, target) {
		fail(t, fmt.Sprintf("ErrorAs: no error in the chain of %s is a %s", show(err), v.Elem().Type()), msgAndArgs)
	}
}

// ErrorContains requires err not to be nil and its text to contain contains.
func ErrorContains(t TestingT, err error, contains string, msgAndArgs ...any) {
	t.Helper()
	switch {
	case err == nil:
		fail(t, fmt.Sprintf("ErrorContains: expected an error containing %q, got nil", contains), msgAndArgs)
	case !strings.Contains(err.Error(), contains):
		fail(t, fmt.Sprintf("ErrorContains: %q does not contain %q", err.Error(), contains), msgAndArgs)
	}
}

// Regexp requires str, as fmt.Sprint prints it, to match rx: a *regexp.Regexp or a pattern.
func Regexp(t TestingT, rx any, str any, msgAndArgs ...any) {
	t.Helper()
	re, ok := rx.(*regexp.Regexp)
	if !ok {
		var err error
		if re, err = regexp.Compile(fmt.Sprint(rx)); err != nil {
			fail(t, fmt.Sprintf("Regexp: bad pattern %s: %v", show(rx), err), msgAndArgs)
			return
		}
	}
	var text string
	if b, isBytes := str.([]byte); isBytes {
		text = string(b) // the content, not fmt's [104 105]
	} else {
		text = fmt.Sprint(str)
	}
	if re.FindStringIndex(text) == nil {
		fail(t, fmt.Sprintf("Regexp: %q does not match %q", text, re.String()), msgAndArgs)
	}
}

// Same requires expected and actual to be pointers of one type to the same address.
func Same(t TestingT, expected, actual any, msgAndArgs ...any) {
	t.Helper()
	e, a := reflect.ValueOf(expected), reflect.ValueOf(actual)
	switch {
	case e.Kind() != reflect.Pointer || a.Kind() != reflect.Pointer:
		fail(t, fmt.Sprintf("Same: both must be pointers, got %s and %s", show(expected), show(actual)), msgAndArgs)
	case e.Type() != a.Type() || expected != actual:
		fail(t, fmt.Sprintf("Same: expected %s, got %s: not the same pointer", show(expected), show(actual)), msgAndArgs)
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

func three[T int64 | uint64 | float64](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// compareNumbers orders two numbers of any kinds by value: -1, 0 or +1.
// ok is false when either is NaN.
func compareNumbers(a, b reflect.Value) (c int, ok bool) {
	switch {
	case a.CanInt() && b.CanInt():
		return three(a.Int(), b.Int()), true
	case a.CanUint() && b.CanUint():
		return three(a.Uint(), b.Uint()), true
	case a.CanInt() && b.CanUint():
		if a.Int() < 0 {
			return -1, true
		}
		return three(uint64(a.Int()), b.Uint()), true
	case a.CanUint() && b.CanInt():
		c, ok := compareNumbers(b, a)
		return -c, ok
	}
	x, y := toFloat(a), toFloat(b)
	if math.IsNaN(x) || math.IsNaN(y) {
		return 0, false
	}
	return three(x, y), true
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

var (
	timeType  = reflect.TypeFor[time.Time]()
	bytesType = reflect.TypeFor[[]byte]()
)

// order compares two values of one kind, as testify does: integers,
// unsigned integers, floats (not NaN), strings, times and byte slices.
// ok is false when they cannot be ordered; why says why.
func order(a, b any) (c int, ok bool, why string) {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	if !va.IsValid() || !vb.IsValid() || va.Kind() != vb.Kind() {
		return 0, false, fmt.Sprintf("%s and %s are not of one kind", show(a), show(b))
	}
	switch k := va.Kind(); {
	case isNumber(k):
		if c, ok := compareNumbers(va, vb); ok {
			return c, true, ""
		}
		return 0, false, fmt.Sprintf("cannot order NaN: %s and %s", show(a), show(b))
	case k == reflect.String:
		return strings.Compare(va.String(), vb.String()), true, ""
	case k == reflect.Struct && va.CanConvert(timeType) && vb.CanConvert(timeType):
		ta := va.Convert(timeType).Interface().(time.Time)
		tb := vb.Convert(timeType).Interface().(time.Time)
		return ta.Compare(tb), true, ""
	case k == reflect.Slice && va.CanConvert(bytesType) && vb.CanConvert(bytesType):
		return bytes.Compare(va.Bytes(), vb.Bytes()), true, ""
	}
	return 0, false, fmt.Sprintf("cannot order values of type %T", a)
}

// ordered requires a rel b, where holds tells whether order's result
// satisfies rel.
func ordered(t TestingT, name string, a, b any, rel string, holds func(int) bool, msgAndArgs []any) {
	t.Helper()
	c, ok, why := order(a, b)
	switch {
	case !ok:
		fail(t, name+": "+why, msgAndArgs)
	case !holds(c):
		fail(t, fmt.Sprintf("%s: expected %s %s %s", name, show(a), rel, show(b)), msgAndArgs)
	}
}

// Greater requires e1 > e2, both of one ordered kind.
func Greater(t TestingT, e1, e2 any, msgAndArgs ...any) {
	t.Helper()
	ordered(t, "Greater", e1, e2, ">", func(c int) bool { return c > 0 }, msgAndArgs)
}

// GreaterOrEqual requires e1 >= e2, both of one ordered kind.
func GreaterOrEqual(t TestingT, e1, e2 any, msgAndArgs ...any) {
	t.Helper()
	ordered(t, "GreaterOrEqual", e1, e2, ">=", func(c int) bool { return c >= 0 }, msgAndArgs)
}

// Less requires e1 < e2, both of one ordered kind.
func Less(t TestingT, e1, e2 any, msgAndArgs ...any) {
	t.Helper()
	ordered(t, "Less", e1, e2, "<", func(c int) bool { return c < 0 }, msgAndArgs)
}

// LessOrEqual requires e1 <= e2, both of one ordered kind.
func LessOrEqual(t TestingT, e1, e2 any, msgAndArgs ...any) {
	t.Helper()
	ordered(t, "LessOrEqual", e1, e2, "<=", func(c int) bool { return c <= 0 }, msgAndArgs)
}

// Positive requires e to be greater than the zero value of its type.
func Positive(t TestingT, e any, msgAndArgs ...any) {
	t.Helper()
	if e == nil {
		fail(t, "Positive: got nil", msgAndArgs)
		return
	}
	zero := reflect.Zero(reflect.TypeOf(e)).Interface()
	ordered(t, "Positive", e, zero, ">", func(c int) bool { return c > 0 }, msgAndArgs)
}

// ElementsMatch requires listA and listB (slices or arrays) to hold the same
// elements, each as many times, in any order.
func ElementsMatch(t TestingT, listA, listB any, msgAndArgs ...any) {
	t.Helper()
	a, b := reflect.ValueOf(listA), reflect.ValueOf(listB)
	isList := func(v reflect.Value) bool { return v.Kind() == reflect.Slice || v.Kind() == reflect.Array }
	if !isList(a) || !isList(b) {
		fail(t, fmt.Sprintf("ElementsMatch: %s and %s are not both lists", show(listA), show(listB)), msgAndArgs)
		return
	}
	used := make([]bool, b.Len())
	var extra []any
	for i := 0; i < a.Len(); i++ {
		found := false
		for j := 0; j < b.Len(); j++ {
			if !used[j] && objectsEqual(a.Index(i).Interface(), b.Index(j).Interface()) {
				used[j], found = true, true
				break
			}
		}
		if !found {
			extra = append(extra, a.Index(i).Interface())
		}
	}
	var missing []any
	for j, u := range used {
		if !u {
			missing = append(missing, b.Index(j).Interface())
		}
	}
	if len(extra) > 0 || len(missing) > 0 {
		fail(t, fmt.Sprintf("ElementsMatch: only in the first: %v; only in the second: %v", extra, missing), msgAndArgs)
	}
}
