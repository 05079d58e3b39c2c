package centre

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"net/http"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"

	"github.com/ferrypkg/ferry/deploy/fleet/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/fleet/wire"
)

// Join tokens are Secrets named TokenSecretPrefix+<id>, of type
// TokenSecretType, holding the secret's hash, never the secret.
const (
	TokenSecretType   corev1.SecretType = "ferry.dev/fleet-token"
	TokenSecretPrefix                   = "fleet-token-"
	// Keys of a token's Secret.
	TokenHash        = "hash"
	TokenExpires     = "expires"
	TokenUses        = "uses"
	TokenLabels      = "labels"
	TokenDescription = "description"
)

// labelPart marks the Secrets the centre makes (ca, token).
const labelPart = "fleet.ferry.dev/part"

// Defaults of TokenOptions.
const (
	DefaultTokenTTL  = 24 * time.Hour
	DefaultTokenUses = 1
)

// TokenOptions configures CreateToken. The zero value works.
type TokenOptions struct {
	// TTL is how long the token may be used; DefaultTokenTTL if ≤ 0.
	TTL time.Duration
	// Uses is how many members may join with it; DefaultTokenUses if ≤ 0.
	Uses int
	// Labels are given to every member that joins with it (over the
	// labels the member asks for).
	Labels map[string]string
	// Description says what it is for.
	Description string
}

// CreateToken makes a join token: the Secret fleet-token-<id> (type
// TokenSecretType) holding its secret's hash, expiry, uses left and
// labels. The token pins the centre's CA, made here if there is none yet.
// Only the returned token holds the secret: print it once.
func (c *Centre) CreateToken(ctx context.Context, opts TokenOptions) (wire.Token, error) {
	if err := checkLabels(opts.Labels); err != nil {
		return wire.Token{}, err
	}
	if len(opts.Description) > 1024 {
		return wire.Token{}, fmt.Errorf("the token's description is %d bytes, more than 1024", len(opts.Description))
	}
	ttl, uses := opts.TTL, opts.Uses
	if ttl <= 0 {
		ttl = DefaultTokenTTL
	}
	if uses <= 0 {
		uses = DefaultTokenUses
	}
	ca, err := c.authority(ctx)
	if err != nil {
		return wire.Token{}, err
	}
	labels, err := json.Marshal(opts.Labels)
	if err != nil {
		return wire.Token{}, err
	}
	for range 4 { // a new id if one is taken
		t, err := wire.NewToken(ca.pin())
		if err != nil {
			return wire.Token{}, err
		}
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: c.ns(), Name: TokenSecretPrefix + t.ID, Labels: map[string]string{labelPart: "token"}},
			Type:       TokenSecretType,
			Data: map[string][]byte{
				TokenHash:        []byte(wire.Hash(t.Secret)),
				TokenExpires:     []byte(c.now().Add(ttl).UTC().Format(time.RFC3339)),
				TokenUses:        []byte(strconv.Itoa(uses)),
				TokenLabels:      labels,
				TokenDescription: []byte(opts.Description),
			},
		}
		err = c.Client.Create(ctx, s)
		if apierrors.IsAlreadyExists(err) {
			continue
		}
		if err != nil {
			return wire.Token{}, fmt.Errorf("create the token's Secret %s/%s: %w", c.ns(), s.Name, err)
		}
		return t, nil
	}
	return wire.Token{}, fmt.Errorf("no free token id in namespace %s", c.ns())
}

// tokenRetry bounds the retries of a token's use that another centre's
// join raced: up to about 10 s.
var tokenRetry = wait.Backoff{Steps: 20, Duration: 10 * time.Millisecond, Factor: 1.5, Jitter: 0.5, Cap: time.Second}

// tokenStripes is how many locks joins share, by their token's id: a
// fixed number, whatever ids strangers send.
const tokenStripes = 64

// tokenLock is the lock of joins with token id.
func (c *Centre) tokenLock(id string) *sync.Mutex {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return &c.tokenLocks[h.Sum32()%tokenStripes]
}

// useToken checks a token (it exists, its secret is right, it has not
// expired, it has uses left), then what the join asks with the token's
// labels (admit: the name free, the labels allowed; its refusal is
// returned and no use taken), and takes one use of it, with optimistic
// concurrency: of two joins racing for the last use, one is refused. It
// returns the labels the token gives. A join is told nothing of the
// fleet before its token checks out.
func (c *Centre) useToken(ctx context.Context, raw string, admit func(labels map[string]string) error) (map[string]string, string, error) {
	t, err := wire.ParseToken(raw)
	if err != nil {
		return nil, "", refuse(http.StatusUnauthorized, ErrToken, "%v", err)
	}
	// Joins with one token take its uses one at a time here; other
	// centres on the same management cluster still race (Conflict, tried
	// again with a backoff long enough for many of them).
	mu := c.tokenLock(t.ID)
	mu.Lock()
	defer mu.Unlock()
	var labels map[string]string
	err = retry.RetryOnConflict(tokenRetry, func() error {
		var s corev1.Secret
		if err := c.fresh().Get(ctx, c.key(TokenSecretPrefix+t.ID), &s); err != nil {
			if apierrors.IsNotFound(err) {
				// As for a wrong secret: a stranger learns no token's id.
				return refuse(http.StatusUnauthorized, ErrToken, "join token %s is not one the centre made (or it was deleted)", t.ID)
			}
			return fmt.Errorf("read join token %s: %w", t.ID, err)
		}
		if s.Type != TokenSecretType || !wire.SameHash(t.Secret, string(s.Data[TokenHash])) {
			return refuse(http.StatusUnauthorized, ErrToken, "join token %s is not one the centre made (or it was deleted)", t.ID)
		}
		exp, err := time.Parse(time.RFC3339, string(s.Data[TokenExpires]))
		if err != nil || !c.now().Before(exp) {
			return refuse(http.StatusForbidden, ErrToken, "join token %s expired at %s", t.ID, string(s.Data[TokenExpires]))
		}
		uses, err := strconv.Atoi(string(s.Data[TokenUses]))
		if err != nil || uses <= 0 {
			return refuse(http.StatusForbidden, ErrToken, "join token %s is used up", t.ID)
		}
		labels = nil
		if len(s.Data[TokenLabels]) > 0 {
			if err := json.Unmarshal(s.Data[TokenLabels], &labels); err != nil {
				return fmt.Errorf("join token %s: its labels: %w", t.ID, err)
			}
		}
		if err := admit(labels); err != nil {
			return err
		}
		s.Data[TokenUses] = []byte(strconv.Itoa(uses - 1))
		return c.Client.Update(ctx, &s) // a Conflict is tried again
	})
	if err != nil {
		return nil, "", err
	}
	return labels, TokenSecretPrefix + t.ID, nil
}

// memberLabels are a new member's labels: those it asks for, then the
// token's over them. A member may not ask for a label the centre gives
// (wire.CentreLabel) unless its token gives it.
func memberLabels(asked, token map[string]string) (map[string]string, error) {
	if err := checkLabels(asked); err != nil {
		return nil, refuse(http.StatusBadRequest, nil, "%v", err)
	}
	for k := range asked {
		if _, given := token[k]; wire.CentreLabel(k) && !given {
			return nil, refuse(http.StatusBadRequest, nil, "label %s: a label of ferry's or Kubernetes' domains is the centre's to give (by the token, or on the Member), not a member's to ask for", k)
		}
	}
	out := maps.Clone(asked)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, token)
	return out, nil
}

// checkLabels refuses labels Kubernetes would not take.
func checkLabels(labels map[string]string) error {
	if len(labels) > wire.MaxLabels {
		return fmt.Errorf("%d labels, more than %d", len(labels), wire.MaxLabels)
	}
	for k, v := range labels {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return fmt.Errorf("label %q: %s", truncate(k), errs[0])
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return fmt.Errorf("label %s=%q: %s", k, truncate(v), errs[0])
		}
	}
	return nil
}

// Revoke cuts a member off: its next request is refused (403), its
// reports are no longer imported, and rollouts leave it out. Deleting the
// Member does the same and forgets it.
func (c *Centre) Revoke(ctx context.Context, member string) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var m v1alpha1.Member
		if err := c.fresh().Get(ctx, c.key(member), &m); err != nil {
			return notFound(err, "member "+member, "member %s is not in the fleet", member)
		}
		if m.Spec.Revoked {
			return nil
		}
		m.Spec.Revoked = true
		return c.Client.Update(ctx, &m)
	})
	if err != nil && !errors.Is(err, ErrNotFound) {
		err = fmt.Errorf("revoke member %s: %w", member, err)
	}
	if err != nil {
		return err
	}
	c.kick()
	return nil
}

// newMember creates a Member with its status (created first: the status
// is a subresource); if the status cannot be written, the Member is
// deleted again.
func (c *Centre) newMember(ctx context.Context, m *v1alpha1.Member) error {
	status := *m.Status.DeepCopy()
	err := c.Client.Create(ctx, m)
	if apierrors.IsAlreadyExists(err) {
		return refuse(http.StatusConflict, nil, "member %s is already in the fleet: join with another name", m.Name)
	}
	if err != nil {
		return fmt.Errorf("create member %s: %w", m.Name, err)
	}
	m.Status = status
	if err := c.Client.Status().Update(ctx, m); err != nil {
		_ = c.Client.Delete(ctx, m)
		return fmt.Errorf("write member %s's status: %w", m.Name, err)
	}
	return nil
}
