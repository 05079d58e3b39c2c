package dashboard

import (
	"context"
	"errors"

	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1 "github.com/ferrypkg/ferry/deploy/fleet/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/fleet/wire"
)

// newCentre makes the centre's verbs over a user's client.
// TODO(dash): the real deploy/fleet/centre once it lands.
func newCentre(*FleetOptions) func(client.WithWatch) fleetActions {
	return func(client.WithWatch) fleetActions { return noCentre{} }
}

var errNoCentre = errors.New("the fleet centre is not in this build of ferry")

type noCentre struct{}

func (noCentre) Import(context.Context, []byte) (*fleetv1.Member, error) { return nil, errNoCentre }
func (noCentre) Bundle(context.Context, string, string, string) (*bundleResult, error) {
	return nil, errNoCentre
}
func (noCentre) Promote(context.Context, string, string, string, string) (*fleetv1.ReleaseTrack, error) {
	return nil, errNoCentre
}
func (noCentre) Rollback(context.Context, string, string) (*fleetv1.Placement, error) {
	return nil, errNoCentre
}
func (noCentre) Desired(context.Context, string) (*wire.Desired, error) { return nil, errNoCentre }
