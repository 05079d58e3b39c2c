package dashboard

import (
	"errors"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ferrypkg/ferry/deploy/fleet/centre"
)

// The centre has the verbs the fleet pages call.
var _ fleetActions = (*centre.Centre)(nil)

// newCentre makes the centre's verbs over a user's client: the centre of
// `ferry fleet serve`, its rollout engine not run (that is the serving
// centre's), its registry the dashboard's --fleet-registry.
func newCentre(o *FleetOptions) func(client.WithWatch) fleetActions {
	var fo FleetOptions
	if o != nil {
		fo = *o
	}
	return func(cl client.WithWatch) fleetActions {
		return &centre.Centre{Client: cl, Namespace: fo.Namespace, Registry: fo.Registry, Remote: fo.Remote, Spool: fo.Spool}
	}
}

// actionStatus is the status a refused centre verb answers with: the API
// server's when it is one (a user RBAC refuses: 403), the centre's
// refusals by their kind, else 422 (the centre would not do it).
func actionStatus(err error) int {
	var se interface{ Status() metav1.Status }
	var fb *forbidden
	switch {
	case errors.As(err, &fb):
		return http.StatusForbidden
	case errors.As(err, &se) && se.Status().Code != 0:
		return int(se.Status().Code)
	case errors.Is(err, centre.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, centre.ErrRevoked), errors.Is(err, centre.ErrToken):
		return http.StatusForbidden
	case errors.Is(err, centre.ErrReplay):
		return http.StatusConflict
	}
	return http.StatusUnprocessableEntity
}
