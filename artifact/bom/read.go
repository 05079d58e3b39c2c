package bom

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/ferrypkg/ferry/artifact/definition"
)

// Limits bound what Read takes from one SBOM document. A field ≤ 0 takes
// DefaultLimits' value.
type Limits struct {
	// MaxBytes bounds the document's size: 64 MiB, as artifact.MaxSBOMSize.
	MaxBytes int64
	// MaxComponents bounds the components a document lists (nested ones
	// included): 200,000.
	MaxComponents int
	// MaxString bounds a name, version, type, package URL or license:
	// 64 KiB.
	MaxString int
	// MaxLicenses bounds the licenses of one component: 256.
	MaxLicenses int
}

// DefaultLimits are the limits Read applies where a Limits field is ≤ 0.
var DefaultLimits = Limits{MaxBytes: 64 << 20, MaxComponents: 200_000, MaxString: 64 << 10, MaxLicenses: 256}

// withDefaults is lim with DefaultLimits' value in every field ≤ 0.
func (lim Limits) withDefaults() Limits {
	d := DefaultLimits
	if lim.MaxBytes > 0 {
		d.MaxBytes = lim.MaxBytes
	}
	if lim.MaxComponents > 0 {
		d.MaxComponents = lim.MaxComponents
	}
	if lim.MaxString > 0 {
		d.MaxString = lim.MaxString
	}
	if lim.MaxLicenses > 0 {
		d.MaxLicenses = lim.MaxLicenses
	}
	return d
}

// maxDepth bounds the nesting of what Read skips (Decode holds its own
// bound, 10,000 levels).
const maxDepth = 256

// ErrFormat is the error Read returns (wrapped, with what is wrong) for a
// document that is not one of the format its media type names, is
// malformed, or is over a limit.
var ErrFormat = errors.New("not a readable SBOM")

// Read returns the components of the SBOM document r holds, whose media
// type (an OCI artifactType) is definition.ArtifactTypeSPDX (SPDX 2.x JSON:
// its packages), ArtifactTypeCycloneDX (CycloneDX JSON: the subject in its
// metadata and its components, nested ones included, files left out) or
// ArtifactTypeSyft (Syft JSON: its artifacts), in the document's order.
// It streams the document, holding one entry at a time, and refuses one
// over lim in a one-line error naming the bound; an unknown media type or
// a malformed document is an error too. Each error wraps ErrFormat.
func Read(r io.Reader, mediaType string, lim Limits) ([]Component, error) {
	var f format
	switch mediaType {
	case definition.ArtifactTypeSPDX:
		f = spdxFormat
	case definition.ArtifactTypeCycloneDX:
		f = cycloneDXFormat
	case definition.ArtifactTypeSyft:
		f = syftFormat
	default:
		return nil, fmt.Errorf("SBOM media type %.64q is not SPDX, CycloneDX or Syft JSON: %w", mediaType, ErrFormat)
	}
	lim = lim.withDefaults()
	cr := &countReader{r: io.LimitReader(r, lim.MaxBytes+1)}
	d := &docReader{dec: json.NewDecoder(cr), lim: lim, name: f.name, strs: map[string]string{}}
	d.dec.UseNumber() // a number is skipped, never converted
	err := d.object(func(key string) error { return f.field(d, key) })
	if err == nil {
		// Anything after the document but blanks is an error too.
		if _, terr := d.dec.Token(); terr != io.EOF {
			err = errors.New("data after the document")
		}
	}
	if cr.n > lim.MaxBytes {
		return nil, fmt.Errorf("%s is more than %d bytes: %w", f.name, lim.MaxBytes, ErrFormat)
	}
	if err != nil {
		if errors.Is(err, ErrFormat) {
			return nil, err
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			err = errors.New("the document ends early")
		}
		return nil, fmt.Errorf("%s: %s: %w", f.name, oneLine(err), ErrFormat)
	}
	if len(d.holes) > 0 {
		slices.Sort(d.holes) // a file's place is given back after its components'
		out := d.out[:0]
		for i, c := range d.out {
			if len(d.holes) > 0 && d.holes[0] == i {
				d.holes = d.holes[1:]
				continue
			}
			out = append(out, c)
		}
		d.out = out
	}
	return d.out, nil
}

// format is how Read takes one kind of document.
type format struct {
	// name names a document of the format in errors.
	name string
	// field reads the value of the document's top-level key.
	field func(d *docReader, key string) error
}

// countReader counts the bytes read through it.
type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// docReader walks one document with a json.Decoder, entry by entry.
type docReader struct {
	dec  *json.Decoder
	lim  Limits
	name string
	out  []Component
	// holes are places in out given back (files with components in
	// them), removed when Read returns.
	holes []int
	strs  map[string]string // interned licenses, types and versions
}

// object reads an object, calling fn for each key with the decoder before
// its value; fn must consume the value.
func (d *docReader) object(fn func(key string) error) error {
	if err := d.delim('{', "an object"); err != nil {
		return err
	}
	for d.dec.More() {
		t, err := d.dec.Token()
		if err != nil {
			return err
		}
		key, _ := t.(string)
		if err := fn(key); err != nil {
			return err
		}
	}
	_, err := d.dec.Token()
	return err
}

// array reads an array named what, calling fn before each element; fn must
// consume it.
func (d *docReader) array(what string, fn func(i int) error) error {
	if err := d.delim('[', what+" as an array"); err != nil {
		return err
	}
	for i := 0; d.dec.More(); i++ {
		if err := fn(i); err != nil {
			return err
		}
	}
	_, err := d.dec.Token()
	return err
}

// delim reads the opening delimiter want, or says the value is not what.
func (d *docReader) delim(want json.Delim, what string) error {
	t, err := d.dec.Token()
	if err != nil {
		return err
	}
	if t != want {
		return fmt.Errorf("want %s, found %s", what, kindOf(t))
	}
	return nil
}

// kindOf names the JSON kind of a token.
func kindOf(t json.Token) string {
	switch t := t.(type) {
	case json.Delim:
		if t == '{' {
			return "an object"
		}
		if t == '[' {
			return "an array"
		}
		return "the end of a value"
	case string:
		return "a string"
	case float64, json.Number:
		return "a number"
	case bool:
		return "a boolean"
	}
	return "null"
}

// skip consumes one value of any kind, at most maxDepth levels deep.
func (d *docReader) skip() error {
	depth := 0
	for {
		t, err := d.dec.Token()
		if err != nil {
			return err
		}
		switch t {
		case json.Delim('{'), json.Delim('['):
			if depth++; depth > maxDepth {
				return fmt.Errorf("nested more than %d levels deep", maxDepth)
			}
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
		if depth == 0 {
			return nil
		}
	}
}

// smallEntry is the size up to which an entry (a package, a component
// with what nests in it, an artifact) is decoded whole, the fast way; one
// larger is walked token by token (several times slower), so that what it
// lists costs memory only for what Read keeps of it. Decoded whole, an
// entry of smallEntry bytes holds at most a few MiB.
const smallEntry = 64 << 10

// entry reads the next value, an entry where: one of at most smallEntry
// bytes decoded into v and then taken by fast, a larger one taken by walk
// reading it from d's decoder.
func (d *docReader) entry(where loc, v any, fast func() error, walk func() error) error {
	var raw json.RawMessage
	if err := d.dec.Decode(&raw); err != nil {
		return err
	}
	if len(raw) <= smallEntry {
		err := json.Unmarshal(raw, v)
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			field := te.Field
			if field == "" {
				field = "the value"
			}
			return fmt.Errorf("%s: %s is %s, not %s", where, field, article(te.Value), te.Type)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		return fast()
	}
	saved := d.dec
	defer func() { d.dec = saved }()
	d.dec = json.NewDecoder(bytes.NewReader(raw))
	d.dec.UseNumber()
	return walk()
}

// article puts "a" or "an" before a JSON kind.
func article(kind string) string {
	if kind != "" && strings.ContainsRune("aeiou", rune(kind[0])) {
		return "an " + kind
	}
	return "a " + kind
}

// skipValue consumes one value inside an entry with the decoder's own
// scanner (bounded at 10,000 levels), which is several times faster than
// token by token; the value is held in the decoder's buffer meanwhile, as
// the document's bytes are.
func (d *docReader) skipValue() error {
	var s skipped
	return d.dec.Decode(&s)
}

// skipped takes any JSON value and keeps nothing of it.
type skipped struct{}

func (*skipped) UnmarshalJSON([]byte) error { return nil }

// jsonObject is the token that opens an object.
var jsonObject = json.Delim('{')

// str reads a string value (null reads as "") of the entry where, or says
// that field is something else.
func (d *docReader) str(where loc, field string) (string, error) {
	t, err := d.dec.Token()
	if err != nil {
		return "", err
	}
	switch t := t.(type) {
	case string:
		return t, nil
	case nil:
		return "", nil
	}
	return "", fmt.Errorf("%s: %s is %s, not string", where, field, kindOf(t))
}

// fields reads an object of the entry where (or null, reporting it),
// calling fn for each key with the decoder before its value; fn must
// consume the value.
func (d *docReader) fields(where loc, fn func(key string) error) (null bool, err error) {
	t, err := d.dec.Token()
	if err != nil {
		return false, err
	}
	if t == nil {
		return true, nil
	}
	if t != jsonObject {
		return false, fmt.Errorf("%s: want an object, found %s", where, kindOf(t))
	}
	return false, d.inObject(fn)
}

// inObject reads the rest of an object whose "{" is read.
func (d *docReader) inObject(fn func(key string) error) error {
	for d.dec.More() {
		t, err := d.dec.Token()
		if err != nil {
			return err
		}
		key, _ := t.(string)
		if err := fn(key); err != nil {
			return err
		}
	}
	_, err := d.dec.Token()
	return err
}

// list reads the array field of the entry where (null is an empty one),
// calling fn before each element; fn must consume it.
func (d *docReader) list(where loc, field string, fn func(i int) error) error {
	t, err := d.dec.Token()
	if err != nil {
		return err
	}
	if t == nil {
		return nil
	}
	if t != json.Delim('[') {
		return fmt.Errorf("%s: %s is %s, not an array", where, field, kindOf(t))
	}
	for i := 0; d.dec.More(); i++ {
		if err := fn(i); err != nil {
			return err
		}
	}
	_, err = d.dec.Token()
	return err
}

// license adds the license l to ls as licenses does, refusing more than
// the limit as soon as there are.
func (d *docReader) license(where loc, ls []string, l string) ([]string, error) {
	ls = licenses(ls, l)
	if len(ls) > d.lim.MaxLicenses {
		return nil, fmt.Errorf("%s: %s has more than %d licenses: %w", d.name, where, d.lim.MaxLicenses, ErrFormat)
	}
	return ls, nil
}

// loc says where an entry is in a document, for errors: "package 3",
// "component 2.0" (nested), "bomFormat" (i < 0).
type loc struct {
	kind   string
	i      int
	parent *loc
}

func (l loc) String() string {
	switch {
	case l.parent != nil:
		return fmt.Sprintf("%s.%d", l.parent, l.i)
	case l.i < 0:
		return l.kind
	}
	return fmt.Sprintf("%s %d", l.kind, l.i)
}

// add checks c against the limits and appends it.
func (d *docReader) add(where loc, c Component) error {
	slot, err := d.reserve()
	if err != nil {
		return err
	}
	return d.set(where, slot, c)
}

// reserve takes the next place in Read's result, refusing one past the
// component limit.
func (d *docReader) reserve() (int, error) {
	if len(d.out) >= d.lim.MaxComponents {
		return 0, fmt.Errorf("SBOM has more than %d components: %w", d.lim.MaxComponents, ErrFormat)
	}
	d.out = append(d.out, Component{})
	return len(d.out) - 1, nil
}

// release gives back the place slot: at once when it is the last one,
// else when Read returns.
func (d *docReader) release(slot int) {
	if slot == len(d.out)-1 {
		d.out = d.out[:slot]
		return
	}
	d.holes = append(d.holes, slot)
}

// set checks c against the limits and puts it in the place slot.
func (d *docReader) set(where loc, slot int, c Component) error {
	for _, s := range [...]struct{ what, v string }{{"name", c.Name}, {"version", c.Version}, {"type", c.Type}, {"package URL", c.PURL}} {
		if err := d.checkString(where, s.what, s.v); err != nil {
			return err
		}
	}
	if len(c.Licenses) > d.lim.MaxLicenses {
		return fmt.Errorf("%s: %s has more than %d licenses: %w", d.name, where, d.lim.MaxLicenses, ErrFormat)
	}
	for i, l := range c.Licenses {
		if err := d.checkString(where, "license", l); err != nil {
			return err
		}
		c.Licenses[i] = d.intern(l)
	}
	if t := purlType(c.PURL); t != "" {
		c.Type = t
	}
	c.Type, c.Version = d.intern(c.Type), d.intern(c.Version)
	d.out[slot] = c
	return nil
}

// checkString refuses a string over the limit.
func (d *docReader) checkString(where loc, what, s string) error {
	if len(s) > d.lim.MaxString {
		return fmt.Errorf("%s: %s: a %s of %d bytes is longer than %d: %w", d.name, where, what, len(s), d.lim.MaxString, ErrFormat)
	}
	return nil
}

// intern returns s, shared with every equal string of the document.
func (d *docReader) intern(s string) string {
	if v, ok := d.strs[s]; ok {
		return v
	}
	d.strs[s] = s
	return s
}

// licenses appends the licenses of ls that say something (not
// NOASSERTION, NONE or empty) and are not there yet.
func licenses(to []string, ls ...string) []string {
	for _, l := range ls {
		l = strings.TrimSpace(l)
		if l == "" || l == "NOASSERTION" || l == "NONE" {
			continue
		}
		dup := false
		for _, h := range to {
			dup = dup || h == l
		}
		if !dup {
			to = append(to, l)
		}
	}
	return to
}

// purlType is the lower-cased type of a package URL, "" if p is none.
func purlType(p string) string {
	rest, ok := strings.CutPrefix(p, "pkg:")
	if !ok {
		return ""
	}
	rest = strings.TrimLeft(rest, "/")
	t, _, ok := strings.Cut(rest, "/")
	if !ok || t == "" {
		return ""
	}
	return strings.ToLower(t)
}

// maxErrLen bounds the part of an error a document can fill.
const maxErrLen = 200

// oneLine keeps the first line of err's message, at most maxErrLen bytes
// of it (a decoder's error quotes the document: a number of 60 MiB).
func oneLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	if len(s) > maxErrLen {
		s = strings.ToValidUTF8(s[:maxErrLen], "") + "…"
	}
	return s
}
