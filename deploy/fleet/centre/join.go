package centre

import (
	"errors"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/deploy/fleet/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/fleet/wire"
)

// serveJoin trades a token for a credential: the request is checked whole
// (name, labels, public key) before the token is looked at, then the
// token; only then is the name looked up (a stranger learns nothing of
// the fleet's members), which must be free, and the labels asked for
// checked against the token's. The token gives up one use, and the
// Member is created with the token's labels over the request's, its
// public key and the credential's hash.
func (c *Centre) serveJoin(w http.ResponseWriter, r *http.Request) (string, error) {
	ctx := r.Context()
	var req wire.JoinRequest
	if err := c.readJSON(w, r, wire.MaxJoinRequest, "join request", &req); err != nil {
		return "", err
	}
	if !wire.ValidMemberName(req.Name) {
		return "", refuse(http.StatusBadRequest, nil, "the member name %q is not a DNS label (lower-case letters, digits and '-', at most 63)", truncate(req.Name))
	}
	if err := checkPublicKey(req.PublicKey); err != nil {
		return req.Name, err
	}
	if len(req.Agent) > 128 {
		return req.Name, refuse(http.StatusBadRequest, nil, "the agent's version is %d bytes, more than 128", len(req.Agent))
	}
	if err := checkLabels(req.Labels); err != nil {
		return req.Name, refuse(http.StatusBadRequest, nil, "%v", err)
	}
	var labels map[string]string
	_, tokenName, err := c.useToken(ctx, req.Token, func(tokenLabels map[string]string) (err error) {
		if _, err = c.member(ctx, req.Name); err == nil {
			return refuse(http.StatusConflict, nil, "member %s is already in the fleet: join with another name", req.Name)
		} else if !errors.Is(err, ErrNotFound) {
			return err
		}
		labels, err = memberLabels(req.Labels, tokenLabels)
		return err
	})
	if err != nil {
		return req.Name, err
	}
	cred, err := wire.NewCredential(req.Name)
	if err != nil {
		return req.Name, err
	}
	_, secret, err := wire.ParseCredential(cred)
	if err != nil {
		return req.Name, err
	}
	now := metav1.NewTime(c.now())
	m := &v1alpha1.Member{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.ns(), Name: req.Name, Labels: labels},
		Spec:       v1alpha1.MemberSpec{Mode: v1alpha1.Connected, PublicKey: req.PublicKey},
		Status: v1alpha1.MemberStatus{
			Credential: wire.Hash(secret),
			JoinedAt:   &now, JoinedWith: tokenName, Agent: req.Agent,
			Interval: &metav1.Duration{Duration: c.interval()},
		},
	}
	if err := c.newMember(ctx, m); err != nil {
		return req.Name, err
	}
	c.kick()
	writeJSON(w, http.StatusOK, wire.JoinResponse{Member: req.Name, Credential: cred, IntervalSeconds: int(c.interval().Seconds())})
	return req.Name, nil
}

// checkPublicKey refuses a site key that is not a PEM public key.
func checkPublicKey(pemKey string) error {
	if pemKey == "" {
		return refuse(http.StatusBadRequest, nil, "no public key: send the site's public key (PEM)")
	}
	if len(pemKey) > 8192 {
		return refuse(http.StatusBadRequest, nil, "the public key is %d bytes, more than 8192", len(pemKey))
	}
	if _, err := artifact.ParsePublicKey("the site's public key", []byte(pemKey)); err != nil {
		return refuse(http.StatusBadRequest, nil, "%v", err)
	}
	return nil
}
