package inbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// KeyFunc reads the producer's event id from a delivery. Transport adapters
// call it on a Message whose ID is still empty. It returns an error wrapping
// ErrNoMessageID when the id is missing or empty, and ErrMalformedID when it
// cannot be read. The client validates and canonicalises what it returns.
//
// A KeyFunc must never invent an id: a consumer that mints identity for a
// message it may see twice cannot recognise the second delivery.
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

// JSONKey returns a KeyFunc that reads the id from a string field of a JSON
// object payload. path names the field, with dots between the names of
// nested objects: "event_id" or "meta.event_id". A field that is missing,
// null or empty gives ErrNoMessageID; a payload that is not a JSON object,
// or a field that is not a string, gives ErrMalformedID.
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

// jsonField finds the string at names in the JSON object data. It reads
// tokens and skips other fields without decoding them into values.
func jsonField(data []byte, names []string) (string, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return "", fmt.Errorf("%w: empty payload", ErrNoMessageID)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	for depth, name := range names {
		if err := expectDelim(dec, '{'); err != nil {
			if depth == 0 {
				return "", fmt.Errorf("%w: payload is not a JSON object: %v", ErrMalformedID, err)
			}
			return "", fmt.Errorf("%w: %q is not an object", ErrMalformedID, names[depth-1])
		}
		found := false
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return "", fmt.Errorf("%w: invalid JSON: %v", ErrMalformedID, err)
			}
			key, _ := tok.(string)
			if key == name {
				found = true
				break
			}
			if err := skipValue(dec); err != nil {
				return "", fmt.Errorf("%w: invalid JSON: %v", ErrMalformedID, err)
			}
		}
		if !found {
			return "", fmt.Errorf("%w: no field %q", ErrNoMessageID, name)
		}
	}
	tok, err := dec.Token()
	if err != nil {
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

func expectDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return fmt.Errorf("found %v", jsonKind(tok))
	}
	return nil
}

// skipValue consumes one complete value.
func skipValue(dec *json.Decoder) error {
	depth := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return io.ErrUnexpectedEOF
			}
			return err
		}
		if d, ok := tok.(json.Delim); ok {
			switch d {
			case '{', '[':
				depth++
			case '}', ']':
				depth--
			}
		}
		if depth == 0 {
			return nil
		}
	}
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
