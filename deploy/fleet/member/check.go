package member

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"unicode"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/ferrypkg/ferry/deploy/fleet/wire"
)

// Bounds on a desired package, beyond the wire's bound on the whole answer.
const (
	// MaxComponents bounds the components a desired package names.
	MaxComponents = 64
	// MaxTimeout bounds the wait for each chart a desired package asks for.
	MaxTimeout = 24 * 60 * 60
)

var (
	// reRepository is a Package's repository (as its CRD checks it).
	reRepository = regexp.MustCompile(`^[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*$`)
	reDigest     = regexp.MustCompile(`^sha256:[a-f0-9]{64}$`)
)

// validName tells whether name can name a Package.
func validName(name string) bool {
	return len(validation.IsDNS1123Subdomain(name)) == 0
}

// checkDesired checks what the centre asks for before anything is done
// with it; its error is one sentence naming the field.
func checkDesired(p wire.DesiredPackage) error {
	if !validName(p.Name) {
		return fmt.Errorf("the centre names a package %q, not a Kubernetes name", printable(p.Name))
	}
	what := "the centre's package " + p.Name
	switch {
	case p.Placement == "" || len(validation.IsValidLabelValue(p.Placement)) > 0:
		return fmt.Errorf("%s: placement %q is not a label value", what, printable(p.Placement))
	case len(p.Repository) > 255 || !reRepository.MatchString(p.Repository):
		return fmt.Errorf("%s: repository %q is not a repository name", what, printable(p.Repository))
	case !reDigest.MatchString(p.Digest):
		return fmt.Errorf("%s: digest %q is not sha256:<64 hex digits>", what, printable(p.Digest))
	case len(p.Version) > 128:
		return fmt.Errorf("%s: its version is %d bytes long", what, len(p.Version))
	case p.TimeoutSeconds < 0 || p.TimeoutSeconds > MaxTimeout:
		return fmt.Errorf("%s: timeout %ds is not between 0 and %ds", what, p.TimeoutSeconds, MaxTimeout)
	case len(p.Components) > MaxComponents:
		return fmt.Errorf("%s: %d components, more than %d", what, len(p.Components), MaxComponents)
	}
	for _, c := range p.Components {
		if len(c) == 0 || len(c) > 253 || strings.IndexFunc(c, unicode.IsControl) >= 0 {
			return fmt.Errorf("%s: component %q is not a name", what, printable(c))
		}
	}
	if _, err := decodeValues(p.Values); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// decodeValues reads a desired package's values: a JSON object (numbers
// kept as written), or nothing.
func decodeValues(raw json.RawMessage) (map[string]any, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	if raw[0] != '{' {
		return nil, errors.New("values are not a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v map[string]any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("values: %w", err)
	}
	if dec.More() {
		return nil, errors.New("values are not one JSON object")
	}
	return v, nil
}

// sameValues compares two values objects as JSON (nothing, null and {}
// being the same).
func sameValues(a, b []byte) bool {
	va, err1 := decodeValues(a)
	vb, err2 := decodeValues(b)
	if err1 != nil || err2 != nil {
		return false
	}
	if len(va) == 0 && len(vb) == 0 {
		return true
	}
	return reflect.DeepEqual(va, vb)
}

// printable is s cut to 64 bytes, its control characters as '?'.
func printable(s string) string {
	s = truncate(s)
	out := []rune(s)
	for i, r := range out {
		if unicode.IsControl(r) {
			out[i] = '?'
		}
	}
	return string(out)
}
