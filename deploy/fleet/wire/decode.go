package wire

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// MaxLabels bounds a member's labels (a join request's, a report's).
const MaxLabels = 64

// UnmarshalJSON reads a report as encoding/json would, but first counts
// its packages, receipts of repositories and labels without allocating
// them: more than MaxPackages, MaxPackages or MaxLabels is refused before
// any is decoded. Within a body of a few MiB, 10⁶ empty packages would
// otherwise cost a GiB of memory before a bound after decoding saw them.
func (r *Report) UnmarshalJSON(data []byte) error {
	var n struct {
		Packages     members `json:"packages"`
		Repositories members `json:"repositories"`
		Labels       members `json:"labels"`
	}
	if err := json.Unmarshal(data, &n); err != nil {
		return err
	}
	switch {
	case n.Packages > MaxPackages:
		return &BoundError{What: "the report", Holds: "lists %d packages", Count: int(n.Packages), Max: MaxPackages}
	case n.Repositories > MaxPackages:
		return &BoundError{What: "the report", Holds: "carries receipts of %d repositories", Count: int(n.Repositories), Max: MaxPackages}
	case n.Labels > MaxLabels:
		return &BoundError{What: "the report", Holds: "has %d labels", Count: int(n.Labels), Max: MaxLabels}
	}
	type plain Report
	return json.Unmarshal(data, (*plain)(r))
}

// UnmarshalJSON reads a desired state as encoding/json would, refusing
// more than MaxPackages packages before any is decoded.
func (d *Desired) UnmarshalJSON(data []byte) error {
	var n struct {
		Packages members `json:"packages"`
	}
	if err := json.Unmarshal(data, &n); err != nil {
		return err
	}
	if n.Packages > MaxPackages {
		return &BoundError{What: "the desired state", Holds: "lists %d packages", Count: int(n.Packages), Max: MaxPackages}
	}
	type plain Desired
	return json.Unmarshal(data, (*plain)(d))
}

// BoundError is a message of the protocol that holds more of something
// than the protocol takes.
type BoundError struct {
	// What is the message ("the report"); Holds says what it holds too
	// many of, Count in it ("lists %d packages").
	What, Holds string
	Count, Max  int
}

func (e *BoundError) Error() string {
	return fmt.Sprintf("%s "+e.Holds+", more than %d", e.What, e.Count, e.Max)
}

// onlyFields refuses a valid JSON object with a key none of names is
// (as encoding/json matches them: case aside), as a json.Decoder that
// disallows unknown fields would, without copying the object into one.
func onlyFields(object []byte, names ...string) error {
	var unknown string
	top(object, func(key []byte) {
		var k string
		if unknown != "" || json.Unmarshal(key, &k) != nil {
			return
		}
		if !slices.ContainsFunc(names, func(n string) bool { return strings.EqualFold(n, k) }) {
			unknown = k
		}
	})
	if unknown != "" {
		return fmt.Errorf("json: unknown field %q", truncate(unknown))
	}
	return nil
}

// members counts the elements of a JSON array, or the members of a JSON
// object, without decoding them; of a key given twice, the larger count.
// encoding/json has checked the value before it calls UnmarshalJSON.
type members int

func (m *members) UnmarshalJSON(value []byte) error {
	if n := members(countMembers(value)); n > *m {
		*m = n
	}
	return nil
}

// countMembers counts the top-level elements of a valid JSON array or
// object (0 for anything else).
func countMembers(value []byte) int {
	n := 0
	top(value, func([]byte) { n++ })
	return n
}

// top calls fn with each top-level element of a valid JSON array or
// object: a string whole (quotes included; an object's key), anything
// else its first byte. It reads the bytes once and allocates nothing.
func top(value []byte, fn func(first []byte)) {
	depth, expect, str := 0, false, -1
	inString, escaped := false, false
	for i, c := range value {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
				if str >= 0 {
					fn(value[str : i+1])
					str = -1
				}
			}
			continue
		}
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case ']', '}':
			depth--
			continue
		case ',':
			expect = depth == 1
			continue
		}
		if expect {
			expect = false
			if c == '"' {
				str = i
			} else {
				fn(value[i : i+1])
			}
		}
		switch c {
		case '"':
			inString = true
		case '[', '{':
			depth++
			expect = depth == 1
		}
	}
}
