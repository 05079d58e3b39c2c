package injector

import (
	"errors"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// encoding/json alone adds ~370 KB to the binary (reflection over every
// decoded type), more than the 3 MiB budget leaves. The server reads three
// small documents (oci-layout, index.json, manifest heads) and writes two
// (error bodies, tag lists), so it uses this minimal RFC 8259 decoder into
// generic values instead. FuzzDecodeJSON checks it against encoding/json.

// jsonNumber is a JSON number, kept as its literal text.
type jsonNumber string

const maxJSONDepth = 10000

// decodeJSON parses one JSON document into map[string]any, []any, string,
// jsonNumber, bool or nil.
func decodeJSON(b []byte) (any, error) {
	d := jsonDecoder{b: b}
	d.space()
	v, err := d.value(0)
	if err != nil {
		return nil, err
	}
	d.space()
	if d.i != len(d.b) {
		return nil, d.errorf("trailing data")
	}
	return v, nil
}

type jsonDecoder struct {
	b []byte
	i int
}

func (d *jsonDecoder) errorf(msg string) error {
	return errors.New("json: " + msg + " at offset " + strconv.Itoa(d.i))
}

func (d *jsonDecoder) space() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *jsonDecoder) value(depth int) (any, error) {
	if depth > maxJSONDepth {
		return nil, d.errorf("nesting too deep")
	}
	if d.i >= len(d.b) {
		return nil, d.errorf("unexpected end of input")
	}
	switch c := d.b[d.i]; {
	case c == '{':
		d.i++
		m := map[string]any{}
		d.space()
		if d.i < len(d.b) && d.b[d.i] == '}' {
			d.i++
			return m, nil
		}
		for {
			d.space()
			if d.i >= len(d.b) || d.b[d.i] != '"' {
				return nil, d.errorf("expected object key")
			}
			k, err := d.str()
			if err != nil {
				return nil, err
			}
			d.space()
			if d.i >= len(d.b) || d.b[d.i] != ':' {
				return nil, d.errorf("expected ':'")
			}
			d.i++
			d.space()
			v, err := d.value(depth + 1)
			if err != nil {
				return nil, err
			}
			m[k] = v
			d.space()
			if d.i < len(d.b) && d.b[d.i] == ',' {
				d.i++
				continue
			}
			if d.i < len(d.b) && d.b[d.i] == '}' {
				d.i++
				return m, nil
			}
			return nil, d.errorf("expected ',' or '}'")
		}
	case c == '[':
		d.i++
		a := []any{}
		d.space()
		if d.i < len(d.b) && d.b[d.i] == ']' {
			d.i++
			return a, nil
		}
		for {
			d.space()
			v, err := d.value(depth + 1)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
			d.space()
			if d.i < len(d.b) && d.b[d.i] == ',' {
				d.i++
				continue
			}
			if d.i < len(d.b) && d.b[d.i] == ']' {
				d.i++
				return a, nil
			}
			return nil, d.errorf("expected ',' or ']'")
		}
	case c == '"':
		return d.str()
	case c == 't':
		return true, d.literal("true")
	case c == 'f':
		return false, d.literal("false")
	case c == 'n':
		return nil, d.literal("null")
	case c == '-' || '0' <= c && c <= '9':
		return d.number()
	}
	return nil, d.errorf("unexpected character")
}

func (d *jsonDecoder) literal(s string) error {
	if !strings.HasPrefix(string(d.b[d.i:min(len(d.b), d.i+len(s))]), s) {
		return d.errorf("invalid literal")
	}
	d.i += len(s)
	return nil
}

func (d *jsonDecoder) number() (any, error) {
	start := d.i
	digits := func() int {
		n := 0
		for d.i < len(d.b) && '0' <= d.b[d.i] && d.b[d.i] <= '9' {
			d.i++
			n++
		}
		return n
	}
	if d.b[d.i] == '-' {
		d.i++
	}
	if d.i < len(d.b) && d.b[d.i] == '0' {
		d.i++
	} else if digits() == 0 {
		return nil, d.errorf("invalid number")
	}
	if d.i < len(d.b) && d.b[d.i] == '.' {
		d.i++
		if digits() == 0 {
			return nil, d.errorf("invalid number")
		}
	}
	if d.i < len(d.b) && (d.b[d.i] == 'e' || d.b[d.i] == 'E') {
		d.i++
		if d.i < len(d.b) && (d.b[d.i] == '+' || d.b[d.i] == '-') {
			d.i++
		}
		if digits() == 0 {
			return nil, d.errorf("invalid number")
		}
	}
	return jsonNumber(d.b[start:d.i]), nil
}

// str decodes a string at d.i (which holds '"'). Invalid UTF-8 and lone
// surrogates become U+FFFD, as in encoding/json.
func (d *jsonDecoder) str() (string, error) {
	d.i++
	var sb strings.Builder
	for {
		if d.i >= len(d.b) {
			return "", d.errorf("unterminated string")
		}
		c := d.b[d.i]
		switch {
		case c == '"':
			d.i++
			return sb.String(), nil
		case c < 0x20:
			return "", d.errorf("control character in string")
		case c == '\\':
			if d.i+1 >= len(d.b) {
				return "", d.errorf("unterminated string")
			}
			e := d.b[d.i+1]
			d.i += 2
			switch e {
			case '"', '\\', '/':
				sb.WriteByte(e)
			case 'b':
				sb.WriteByte('\b')
			case 'f':
				sb.WriteByte('\f')
			case 'n':
				sb.WriteByte('\n')
			case 'r':
				sb.WriteByte('\r')
			case 't':
				sb.WriteByte('\t')
			case 'u':
				r, ok := d.hex4()
				if !ok {
					return "", d.errorf("invalid \\u escape")
				}
				if utf16.IsSurrogate(r) {
					// A high surrogate may pair with a following \u escape.
					save := d.i
					if d.i+1 < len(d.b) && d.b[d.i] == '\\' && d.b[d.i+1] == 'u' {
						d.i += 2
						if r2, ok := d.hex4(); ok {
							if p := utf16.DecodeRune(r, r2); p != utf8.RuneError {
								sb.WriteRune(p)
								continue
							}
						}
					}
					d.i = save
					r = utf8.RuneError
				}
				sb.WriteRune(r)
			default:
				return "", d.errorf("invalid escape")
			}
		case c < utf8.RuneSelf:
			sb.WriteByte(c)
			d.i++
		default:
			r, n := utf8.DecodeRune(d.b[d.i:])
			sb.WriteRune(r) // RuneError for invalid bytes
			d.i += n
		}
	}
}

func (d *jsonDecoder) hex4() (rune, bool) {
	if d.i+4 > len(d.b) {
		return 0, false
	}
	var r rune
	for _, c := range d.b[d.i : d.i+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	d.i += 4
	return r, true
}

// appendJSONString appends s as a JSON string literal.
func appendJSONString(b []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c < 0x20 || c == '<' || c == '>' || c == '&':
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, s[i:i+n]...)
		}
		i += n
	}
	return append(b, '"')
}

// jsonObject, jsonArray and jsonStr read typed values out of a decoded
// document, returning zero values on a type mismatch.
func jsonObject(v any) map[string]any { m, _ := v.(map[string]any); return m }
func jsonArray(v any) []any           { a, _ := v.([]any); return a }
func jsonStr(v any) string            { s, _ := v.(string); return s }
