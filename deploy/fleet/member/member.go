// Package member is a fleet member's side (docs/design/fleet.md), run in
// the member cluster: `ferry fleet join` writes the Secret SecretName
// (WriteJoin); the agent's loop (Agent.Run) makes the site key, trades the
// join token for a credential over the CA the token pins, and then syncs
// every interval — a report of its Packages and receipt in, its desired
// state out — and applies what it is given exactly as `ferry deploy` does:
// each bundle verified with the cluster's own trusted keys, never a key
// from the centre. A carried member writes signed report files instead
// (WriteReport).
package member

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/ferrypkg/ferry/deploy/fleet/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/fleet/wire"
	"github.com/ferrypkg/ferry/internal/cluster"
)

// SecretName is the member's Secret in ferry's namespace. Its keys: url
// (the centre), token (until it is traded), name, labels (JSON), mode
// (Connected or Carried), siteKey (PKCS #8 PEM) and publicKey, credential,
// ca (the centre's CA, PEM, as seen through the token's pin), error (the
// last join or sync failure, one line), joinedAt and lastSync (RFC 3339).
const SecretName = "ferry-fleet"

// SecretType is the type of a Secret SecretName that this package makes.
const SecretType corev1.SecretType = "ferry.dev/fleet-member"

// LabelPlacement, on a Package, names the placement that put it there:
// the member deletes it when no placement wants it any more.
const LabelPlacement = "fleet.ferry.dev/placement"

// MaxLabels bounds a member's labels.
const MaxLabels = wire.MaxLabels

// The keys of the Secret.
const (
	keyURL        = "url"
	keyToken      = "token"
	keyName       = "name"
	keyLabels     = "labels"
	keyMode       = "mode"
	keySiteKey    = "siteKey"
	keyPublicKey  = "publicKey"
	keyCredential = "credential"
	keyCA         = "ca"
	keyError      = "error"
	keyJoinedAt   = "joinedAt"
	keyLastSync   = "lastSync"
)

// Errors of the member's Secret; match them with errors.Is.
var (
	// ErrNotMember means the cluster has no Secret SecretName.
	ErrNotMember = errors.New("this cluster is no fleet member")
	// ErrJoined means the cluster is a member already: WriteJoin replaces
	// its identity only with Config.Force.
	ErrJoined = errors.New("this cluster has joined a fleet already")
	// ErrJoin is a failed join, as the agent recorded it in the Secret.
	ErrJoin = errors.New("the join failed")
)

// Config is what `ferry fleet join` gives a member.
type Config struct {
	// URL is the centre's, https://host[:port]; required when connected.
	URL string
	// Token is the join token; required when connected (a carried member
	// may give it to its first report instead).
	Token string
	// Name is the member's name (a DNS label); empty lets the centre name
	// it (connected members).
	Name string
	// Labels are what the centre's groups select it by.
	Labels map[string]string
	// Mode is v1alpha1.Connected (the default) or v1alpha1.Carried.
	Mode string
	// Force replaces the identity of a member that joined already (its
	// credential and name; its site key stays).
	Force bool
}

// state is the Secret's content, parsed.
type state struct {
	URL, Token, Name, Mode, Credential, Error string
	Labels                                    map[string]string
	SiteKey, PublicKey, CA                    string
	JoinedAt, LastSync                        time.Time
}

// mode is the member's mode: Connected unless the Secret says Carried.
func (s *state) mode() string {
	if s.Mode == "" {
		return v1alpha1.Connected
	}
	return s.Mode
}

func (s *state) joined() bool { return s.Credential != "" || !s.JoinedAt.IsZero() }

// parseState reads a Secret's data. Only what is needed everywhere is
// checked here (labels, times); the URL, token, keys and CA are checked
// where they are used.
func parseState(data map[string][]byte) (*state, error) {
	s := &state{
		URL: string(data[keyURL]), Token: strings.TrimSpace(string(data[keyToken])), Name: string(data[keyName]),
		Mode: string(data[keyMode]), Credential: strings.TrimSpace(string(data[keyCredential])), Error: string(data[keyError]),
		SiteKey: string(data[keySiteKey]), PublicKey: string(data[keyPublicKey]), CA: string(data[keyCA]),
	}
	if s.Name != "" && !wire.ValidMemberName(s.Name) {
		return nil, fmt.Errorf("Secret %s: the member name %q is not a DNS label", SecretName, truncate(s.Name))
	}
	if raw := data[keyLabels]; len(raw) > 0 {
		if err := json.Unmarshal(raw, &s.Labels); err != nil {
			return nil, fmt.Errorf("Secret %s: labels: %w", SecretName, err)
		}
		if err := checkLabels(s.Labels); err != nil {
			return nil, fmt.Errorf("Secret %s: %w", SecretName, err)
		}
	}
	for key, t := range map[string]*time.Time{keyJoinedAt: &s.JoinedAt, keyLastSync: &s.LastSync} {
		if raw := data[key]; len(raw) > 0 {
			v, err := time.Parse(time.RFC3339, string(raw))
			if err != nil {
				return nil, fmt.Errorf("Secret %s: %s is not an RFC 3339 time", SecretName, key)
			}
			*t = v
		}
	}
	return s, nil
}

// put writes s into data: keys of empty values are removed, others kept.
func (s *state) put(data map[string][]byte) error {
	set := func(k, v string) {
		if v == "" {
			delete(data, k)
		} else {
			data[k] = []byte(v)
		}
	}
	labels := ""
	if len(s.Labels) > 0 {
		b, err := json.Marshal(s.Labels)
		if err != nil {
			return err
		}
		labels = string(b)
	}
	when := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format(time.RFC3339)
	}
	set(keyURL, s.URL)
	set(keyToken, s.Token)
	set(keyName, s.Name)
	set(keyLabels, labels)
	set(keyMode, s.Mode)
	set(keySiteKey, s.SiteKey)
	set(keyPublicKey, s.PublicKey)
	set(keyCredential, s.Credential)
	set(keyCA, s.CA)
	set(keyError, s.Error)
	set(keyJoinedAt, when(s.JoinedAt))
	set(keyLastSync, when(s.LastSync))
	return nil
}

// readState reads the Secret; ErrNotMember when there is none.
func readState(ctx context.Context, cs kubernetes.Interface, ns string) (*state, error) {
	sec, err := cs.CoreV1().Secrets(ns).Get(ctx, SecretName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%w (no Secret %s/%s)", ErrNotMember, ns, SecretName)
	}
	if err != nil {
		return nil, fmt.Errorf("read Secret %s/%s: %w", ns, SecretName, err)
	}
	return parseState(sec.Data)
}

// errUnchanged, returned by a mutation, leaves the Secret as it is.
var errUnchanged = errors.New("unchanged")

// mutate applies fn to the Secret as it is now, and writes the result,
// again on a conflict with another writer (the CLI, a second agent). With
// create, a missing Secret is made (fn sees an empty state); without, it
// is ErrNotMember.
func mutate(ctx context.Context, cs kubernetes.Interface, ns string, create bool, fn func(*state) error) (*state, error) {
	secrets := cs.CoreV1().Secrets(ns)
	var out *state
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sec, err := secrets.Get(ctx, SecretName, metav1.GetOptions{})
		missing := apierrors.IsNotFound(err)
		switch {
		case missing && create:
			sec = &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: SecretName, Namespace: ns, Labels: map[string]string{cluster.LabelManagedBy: cluster.ManagedBy}},
				Type:       SecretType,
			}
		case missing:
			return fmt.Errorf("%w (no Secret %s/%s)", ErrNotMember, ns, SecretName)
		case err != nil:
			return fmt.Errorf("read Secret %s/%s: %w", ns, SecretName, err)
		}
		s, err := parseState(sec.Data)
		if err != nil {
			return err
		}
		if err := fn(s); err != nil {
			if errors.Is(err, errUnchanged) {
				out = s
				return nil
			}
			return err
		}
		data := maps.Clone(sec.Data)
		if data == nil {
			data = map[string][]byte{}
		}
		if err := s.put(data); err != nil {
			return err
		}
		sec.Data = data
		if missing {
			_, err = secrets.Create(ctx, sec, metav1.CreateOptions{})
		} else {
			_, err = secrets.Update(ctx, sec, metav1.UpdateOptions{})
		}
		switch {
		case apierrors.IsAlreadyExists(err): // made meanwhile: read it again
			return apierrors.NewConflict(corev1.Resource("secrets"), SecretName, err)
		case apierrors.IsConflict(err):
			return err
		case err != nil:
			return fmt.Errorf("write Secret %s/%s: %w", ns, SecretName, err)
		}
		out = s
		return nil
	})
	return out, err
}

// checkLabels refuses labels Kubernetes would not take on a Member.
func checkLabels(labels map[string]string) error {
	if len(labels) > MaxLabels {
		return fmt.Errorf("%d labels, more than %d", len(labels), MaxLabels)
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

// check validates a Config, filling in its default mode.
func (c *Config) check() error {
	switch c.Mode {
	case "":
		c.Mode = v1alpha1.Connected
	case v1alpha1.Connected, v1alpha1.Carried:
	default:
		return fmt.Errorf("mode %q is neither %s nor %s", truncate(c.Mode), v1alpha1.Connected, v1alpha1.Carried)
	}
	if c.URL != "" || c.Mode == v1alpha1.Connected {
		if err := wire.CheckURL(c.URL); err != nil {
			return err
		}
	}
	if c.Token != "" || c.Mode == v1alpha1.Connected {
		if _, err := wire.ParseToken(c.Token); err != nil {
			return err
		}
	}
	if c.Name != "" && !wire.ValidMemberName(c.Name) {
		return fmt.Errorf("the member name %q is not a DNS label (lowercase letters, digits and '-', at most 63)", truncate(c.Name))
	}
	if c.Name == "" && c.Mode == v1alpha1.Carried {
		return errors.New("a carried member needs a name: the centre learns it from its reports")
	}
	return checkAsked(c.Labels)
}

// checkAsked refuses labels a member may not ask the centre for: those
// Kubernetes would not take, and those the centre gives
// (wire.CentreLabel), which it refuses.
func checkAsked(labels map[string]string) error {
	if err := checkLabels(labels); err != nil {
		return err
	}
	for k := range labels {
		if wire.CentreLabel(k) {
			return fmt.Errorf("label %s: a label of ferry's or Kubernetes' domains is the centre's to give (by the token, or on the Member), not a member's to ask for", k)
		}
	}
	return nil
}

// WriteJoin checks cfg and writes it into the Secret SecretName of
// namespace ns, for the agent to join with (or, carried, for the reports
// to carry). A Secret of a member that has joined is replaced only with
// cfg.Force (ErrJoined otherwise); its site key is kept either way, and
// the last error, credential and CA go.
func WriteJoin(ctx context.Context, cs kubernetes.Interface, ns string, cfg Config) error {
	if err := cfg.check(); err != nil {
		return err
	}
	_, err := mutate(ctx, cs, ns, true, func(s *state) error {
		if s.joined() && !cfg.Force {
			who := s.Name
			if who == "" {
				who = "a member"
			}
			return fmt.Errorf("%w: it is %s of %s (Secret %s/%s)", ErrJoined, who, s.URL, ns, SecretName)
		}
		*s = state{URL: cfg.URL, Token: strings.TrimSpace(cfg.Token), Name: cfg.Name, Labels: cfg.Labels, Mode: cfg.Mode,
			SiteKey: s.SiteKey, PublicKey: s.PublicKey}
		return nil
	})
	return err
}

// Status is a member's state, as its Secret holds it.
type Status struct {
	// Member is its name (empty until the centre names it, when it asked
	// for none).
	Member string `json:"member,omitempty"`
	URL    string `json:"url,omitempty"`
	// Mode is Connected or Carried.
	Mode   string            `json:"mode"`
	Labels map[string]string `json:"labels,omitempty"`
	// Joined: it traded its token for a credential (or, carried, its
	// first report was imported).
	Joined   bool      `json:"joined"`
	JoinedAt time.Time `json:"joinedAt,omitzero"`
	// Pending: a token waits to be traded.
	Pending bool `json:"pending,omitempty"`
	// LastSync is its last heartbeat that the centre answered (written at
	// most once a minute).
	LastSync time.Time `json:"lastSync,omitzero"`
	// Error is the last join or sync failure, one line; empty after a
	// success.
	Error string `json:"error,omitempty"`
	// PublicKey is the site key's public half (PEM).
	PublicKey string `json:"publicKey,omitempty"`
}

func (s *state) status() *Status {
	return &Status{
		Member: s.Name, URL: s.URL, Mode: s.mode(), Labels: s.Labels,
		Joined: s.joined(), JoinedAt: s.JoinedAt, Pending: s.Token != "" && s.Credential == "" && s.mode() == v1alpha1.Connected,
		LastSync: s.LastSync, Error: s.Error, PublicKey: s.PublicKey,
	}
}

// ReadStatus reads the member's Status; ErrNotMember when the cluster
// has no Secret SecretName.
func ReadStatus(ctx context.Context, cs kubernetes.Interface, ns string) (*Status, error) {
	s, err := readState(ctx, cs, ns)
	if err != nil {
		return nil, err
	}
	return s.status(), nil
}

// DefaultWaitPoll is how often WaitJoined reads the Secret.
const DefaultWaitPoll = 500 * time.Millisecond

// WaitJoined waits until the agent has joined (the Secret holds a
// credential) or failed to (it holds an error: ErrJoin with the agent's
// sentence), or ctx ends. A carried member has nothing to wait for.
func WaitJoined(ctx context.Context, cs kubernetes.Interface, ns string) (*Status, error) {
	t := time.NewTicker(DefaultWaitPoll)
	defer t.Stop()
	for {
		st, err := ReadStatus(ctx, cs, ns)
		if err != nil {
			return nil, err
		}
		switch {
		case st.Joined || st.Mode == v1alpha1.Carried:
			return st, nil
		case st.Error != "":
			return st, fmt.Errorf("%w: %s", ErrJoin, st.Error)
		}
		select {
		case <-ctx.Done():
			return st, fmt.Errorf("wait for the agent to join %s: %w", st.URL, ctx.Err())
		case <-t.C:
		}
	}
}

// oneLine folds a message onto one line, at most 512 bytes.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 512 {
		s = s[:512] + "…"
	}
	return s
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
