package imagesig

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
)

// TestNoEngineFailsClosed: a program that did not link the engine refuses
// every image rather than passing it.
func TestNoEngineFailsClosed(t *testing.T) {
	saved := engine.Load()
	engine.Store(nil)
	defer engine.Store(saved)
	p := &Policy{Name: "p", Authorities: []Authority{{Key: &KeyAuthority{PEM: "x"}}}}
	_, err := p.Verify(context.Background(), nil, digest.FromString("x"), nil)
	if !errors.Is(err, ErrUnverified) || !strings.Contains(err.Error(), "no signature verifier linked") {
		t.Fatalf("Verify without an engine: %v", err)
	}
}
