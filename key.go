package inbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// KeyFunc reads the producer's event id from a delivery. Transport adapters
// call it on a Message whose ID is still empty. It returns an error wrapping
// ErrNoMessageID when the id is missing or empty, and ErrMalformedID when it
// cannot be read. The client validates and canonicalises what it returns.
//
// A KeyFunc must never invent an id: a consumer that mints identity for a
// message it may see twice cannot recognise the second delivery. The id is
// never a broker offset, an SQS MessageId or a hash of the payload either:
// each of those changes when the same event is republished, or is shared
// by two different events. The id is per consumer: billing and inventory
// each have their own skip.
type KeyFunc func(msg Message) (string, error)

// HeaderKey returns a KeyFunc that reads the id from the header (or message
// attribute) with exactly this name.
func HeaderKey(name string) KeyFunc {
	return func(msg Message) (string, error) {
		v, ok := msg.Headers[name]
		if !ok {
			return "", fmt.Errorf("%w: no header %q", ErrNoMessageID, name)
		}
		if v == "" {
			return "", fmt.Errorf("%w: header %q is empty", ErrNoMessageID, name)
		}
		return v, nil
	}
}

// Limits of the work JSONKey does on one payload, so that a large or deeply
// nested payload, delivered again and again, cannot hold a consumer up. A
// payload over a limit is not a usable document: JSONKey returns
// ErrMalformedID, and the error names the limit.
const (
	// JSONKeyMaxBytes is the largest payload JSONKey reads: 4 MiB, more
	// than Kafka's and SQS's default message size limits. Read the id of
	// larger payloads with a KeyFunc of your own, or from a header.
	JSONKeyMaxBytes = 4 << 20
	// JSONKeyMaxDepth is the deepest nesting of objects and arrays that
	// JSONKey accepts anywhere in a payload.
	JSONKeyMaxDepth = 128
)

// JSONKey returns a KeyFunc that reads the id from a string field of a JSON
// object payload. path names the field, with dots between the names of
// nested objects: "event_id" or "meta.event_id". Names match exactly.
//
// The payload must be one whole JSON document, at most JSONKeyMaxBytes long
// and JSONKeyMaxDepth deep: a payload cut short after the field, or with
// anything after the document, is malformed. A name repeated in an object
// takes its last value, as encoding/json does when it decodes the payload
// into a struct.
//
// A field that is missing, null or empty gives ErrNoMessageID; a payload
// that is not a JSON object, or a field that is not a string, gives
// ErrMalformedID.
func JSONKey(path string) KeyFunc {
	names := strings.Split(path, ".")
	return func(msg Message) (string, error) {
		v, err := jsonField(msg.Payload, names)
		if err != nil {
			return "", fmt.Errorf("json field %q: %w", path, err)
		}
		return v, nil
	}
}

// jsonField finds the string at names in the JSON object data. It checks
// the document whole first, then walks only the objects on the path,
// skipping every other value without decoding it.
func jsonField(data []byte, names []string) (string, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return "", fmt.Errorf("%w: empty payload", ErrNoMessageID)
	}
	if len(data) > JSONKeyMaxBytes {
		return "", fmt.Errorf("%w: payload of %d bytes is larger than JSONKeyMaxBytes (%d)", ErrMalformedID, len(data), JSONKeyMaxBytes)
	}
	if depth := jsonDepth(data, JSONKeyMaxDepth); depth > JSONKeyMaxDepth {
		return "", fmt.Errorf("%w: payload nests deeper than JSONKeyMaxDepth (%d)", ErrMalformedID, JSONKeyMaxDepth)
	}
	if !json.Valid(data) {
		var v any
		err := json.Unmarshal(data, &v) // says what is wrong, and where
		return "", fmt.Errorf("%w: not one whole JSON document: %v", ErrMalformedID, err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	w := jsonWalk{names: names}
	if err := w.object(dec, 0); err != nil {
		return "", err
	}
	switch {
	case w.notObject != "":
		return "", fmt.Errorf("%w: %q is not an object", ErrMalformedID, w.notObject)
	case w.found == nil:
		return "", fmt.Errorf("%w: no field %q", ErrNoMessageID, names[w.reached])
	}
	var tok any
	if err := json.Unmarshal(w.found, &tok); err != nil {
		return "", fmt.Errorf("%w: invalid JSON: %v", ErrMalformedID, err)
	}
	switch v := tok.(type) {
	case nil:
		return "", fmt.Errorf("%w: field is null", ErrNoMessageID)
	case string:
		if v == "" {
			return "", fmt.Errorf("%w: field is empty", ErrNoMessageID)
		}
		return v, nil
	default:
		return "", fmt.Errorf("%w: field is a %s, not a string", ErrMalformedID, jsonKind(tok))
	}
}

// jsonWalk walks the objects on a path through a valid document and keeps
// the last value found at its end.
type jsonWalk struct {
	names []string
	found json.RawMessage
	// notObject names the last field on the path whose value was not an
	// object, unless a later one with that name was.
	notObject string
	// reached is the deepest level of the path whose object was found.
	reached int
}

// object reads the value at dec, which must be an object for level 0, and
// walks the fields named names[level].
func (w *jsonWalk) object(dec *json.Decoder, level int) error {
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("%w: invalid JSON: %v", ErrMalformedID, err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return fmt.Errorf("%w: payload is not a JSON object: found %v", ErrMalformedID, jsonKind(tok))
	}
	w.reached = max(w.reached, level)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("%w: invalid JSON: %v", ErrMalformedID, err)
		}
		key, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return fmt.Errorf("%w: invalid JSON: %v", ErrMalformedID, err)
		}
		if key != w.names[level] {
			continue
		}
		if level == len(w.names)-1 {
			w.found = raw
			continue
		}
		if first := bytes.TrimLeft(raw, " \t\r\n"); len(first) == 0 || first[0] != '{' {
			w.notObject = key
			continue
		}
		w.notObject = ""
		if err := w.object(json.NewDecoder(bytes.NewReader(raw)), level+1); err != nil {
			return err
		}
	}
	_, err = dec.Token() // the closing brace
	return err
}

// jsonDepth returns the deepest nesting of objects and arrays in data, or
// limit+1 as soon as it passes limit. It reads brackets outside strings
// only, and does not validate.
func jsonDepth(data []byte, limit int) int {
	depth, deepest := 0, 0
	inString, escaped := false, false
	for _, c := range data {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
			if depth > deepest {
				deepest = depth
				if deepest > limit {
					return deepest
				}
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return deepest
}

// jsonKind names the kind of a JSON token for error messages.
type jsonKindName string

func jsonKind(tok json.Token) jsonKindName {
	switch tok.(type) {
	case json.Delim:
		switch tok.(json.Delim) {
		case '{':
			return "object"
		case '[':
			return "array"
		}
		return "delimiter"
	case bool:
		return "boolean"
	case json.Number, float64:
		return "number"
	case string:
		return "string"
	case nil:
		return "null"
	}
	return "value"
}
